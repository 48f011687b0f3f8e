package leases

import (
	"os"
	"strings"

	"github.com/oklog/ulid/v2"
)

// Owner identifies a lease holder. ID names the node (stable across
// restarts); Incarnation names one run of it; Host, Boot and PID let a
// claimant on the same machine prove the holder's process is gone.
type Owner struct {
	ID          string `msgpack:"i"`
	Incarnation string `msgpack:"n"`
	Host        string `msgpack:"h,omitempty"`
	Boot        string `msgpack:"b,omitempty"`
	PID         int    `msgpack:"p,omitempty"`
	// Settings is the fingerprint of the turn settings the node runs, so
	// a node tells which live nodes can replay a turn it cannot.
	Settings string `msgpack:"s,omitempty"`
	// Providers are the model providers the node runs agents on, comma
	// separated, so a node tells whether a live node can run an agent it
	// cannot.
	Providers string `msgpack:"m,omitempty"`
	// Code names the node's code label and formats, which an agent
	// version's settings carry too (lash's code(Settings)).
	Code string `msgpack:"c,omitempty"`
}

// LocalOwner describes this process as node id, with a fresh incarnation.
func LocalOwner(id string) Owner {
	host, _ := os.Hostname()
	return Owner{ID: id, Incarnation: ulid.Make().String(), Host: host, Boot: bootID(), PID: os.Getpid()}
}

// bootID changes at every boot, so a PID is only compared within one.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (o Owner) same(p Owner) bool { return o.ID == p.ID && o.Incarnation == p.Incarnation }

func (o Owner) String() string {
	s := o.ID + "/" + o.Incarnation
	if o.Host != "" {
		s += "@" + o.Host
	}
	return s
}
