package main

import (
	"flag"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
)

// leaseTTLSetting is the nodes' lease TTL. The bucket does not say a
// key's TTL, so expiry is the last renewal plus this.
func leaseTTLSetting(a *app, fs *flag.FlagSet) {
	fs.DurationVar(&a.leaseTTL, "lease-ttl", 15*time.Second,
		"the nodes' lease and liveness TTL, as lash-node's: a lease or node expires this long after its last renewal or beat")
}

var leasesLsCmd = &command{
	name:    "leases ls",
	summary: "session leases: holder, node, fencing token, expiry",
	doc: `Lists the live leases in the deployment's lease bucket: the key, what it is for
(kind and id), the holder (node/incarnation@host), whether the holder's node is live,
the fencing token (the revision of the claim), and when the lease expires unless it
is renewed: its last renewal, by the server's clock, plus --lease-ttl.`,
	settings: leaseTTLSetting,
	run:      runLeasesLs,
}

var nodesLsCmd = &command{
	name:    "nodes ls",
	summary: "live nodes, from their liveness keys",
	doc: `Lists the nodes whose liveness keys are live: node id, incarnation (one run of the
node), host and PID, the leases it holds, and when its liveness key expires unless it
beats again (its last beat plus --lease-ttl). A lease whose holder is not listed here
is reclaimed at once by the next node that wants it.`,
	settings: leaseTTLSetting,
	run:      runNodesLs,
}

type leaseJSON struct {
	Key         string    `json:"key"`
	Kind        string    `json:"kind"`
	ID          string    `json:"id"`
	Holder      string    `json:"holder"`
	Node        string    `json:"node"`
	Incarnation string    `json:"incarnation"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	NodeLive    bool      `json:"node_live"`
	Token       uint64    `json:"token"`
	Revision    uint64    `json:"revision"`
	Renewed     time.Time `json:"renewed"`
	Expires     time.Time `json:"expires"`
}

type leasesJSON struct {
	Leases []leaseJSON `json:"leases"`
}

// nodeKey is the lease bucket's prefix of node liveness keys.
const nodeKey = "node."

// holders reads the live leases and nodes.
func (a *app) holders() (ls, nodes []leases.Holder, err error) {
	m := leases.New(a.client, leases.Owner{ID: "lash-admin"})
	all, err := m.List(a.ctx, "")
	if err != nil {
		return nil, nil, err
	}
	for _, h := range all {
		if strings.HasPrefix(h.Key, nodeKey) {
			nodes = append(nodes, h)
		} else {
			ls = append(ls, h)
		}
	}
	return ls, nodes, nil
}

func runLeasesLs(a *app, _ []string) error {
	ls, nodes, err := a.holders()
	if err != nil {
		return err
	}
	live := map[[2]string]bool{}
	for _, n := range nodes {
		live[[2]string{n.Owner.ID, n.Owner.Incarnation}] = true
	}
	out := leasesJSON{Leases: []leaseJSON{}}
	for _, h := range ls {
		kind, tok, _ := strings.Cut(h.Key, ".")
		id, err := streams.ParseToken(tok)
		if err != nil {
			id = tok
		}
		out.Leases = append(out.Leases, leaseJSON{Key: h.Key, Kind: kind, ID: id, Holder: h.Owner.String(), Node: h.Owner.ID,
			Incarnation: h.Owner.Incarnation, Host: h.Owner.Host, PID: h.Owner.PID,
			NodeLive: live[[2]string{h.Owner.ID, h.Owner.Incarnation}], Token: h.Token, Revision: h.Revision,
			Renewed: utc(h.Renewed), Expires: utc(h.Renewed.Add(a.leaseTTL))})
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "KIND", "ID", "HOLDER", "NODE", "NODE LIVE", "TOKEN", "RENEWED", "EXPIRES")
		for _, l := range out.Leases {
			row(w, l.Kind, l.ID, l.Holder, l.Node, yesNo(l.NodeLive), l.Token, fmtTime(l.Renewed), fmtTime(l.Expires))
		}
	})
}

type nodeJSON struct {
	Node        string    `json:"node"`
	Incarnation string    `json:"incarnation"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	Leases      int       `json:"leases"`
	Revision    uint64    `json:"revision"`
	Beat        time.Time `json:"beat"`
	Expires     time.Time `json:"expires"`
}

type nodesJSON struct {
	Nodes []nodeJSON `json:"nodes"`
}

func runNodesLs(a *app, _ []string) error {
	ls, nodes, err := a.holders()
	if err != nil {
		return err
	}
	held := map[[2]string]int{}
	for _, h := range ls {
		held[[2]string{h.Owner.ID, h.Owner.Incarnation}]++
	}
	out := nodesJSON{Nodes: []nodeJSON{}}
	for _, n := range nodes {
		o := n.Owner
		out.Nodes = append(out.Nodes, nodeJSON{Node: o.ID, Incarnation: o.Incarnation, Host: o.Host, PID: o.PID,
			Leases: held[[2]string{o.ID, o.Incarnation}], Revision: n.Revision, Beat: utc(n.Renewed),
			Expires: utc(n.Renewed.Add(a.leaseTTL))})
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "NODE", "INCARNATION", "HOST", "PID", "LEASES", "LAST BEAT", "EXPIRES")
		for _, n := range out.Nodes {
			pid := "-"
			if n.PID != 0 {
				pid = strconv.Itoa(n.PID)
			}
			row(w, n.Node, n.Incarnation, n.Host, pid, n.Leases, fmtTime(n.Beat), fmtTime(n.Expires))
		}
	})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
