package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// SyncSubject is where ReadServerSync asks every server for its settings
// (its VARZ). The system account answers it; an account that imports it
// from the system account (with response_type stream, so every server's
// answer comes back) can ask too. No other account can: it has no
// responders there. JetStream cannot be enabled in the system account, so
// a node's own user reads the settings only through such an import.
const SyncSubject = "$SYS.REQ.SERVER.PING.VARZ"

// syncQuiet is how long ReadServerSync waits for one more answer after the
// last one, when it cannot tell whether every server has answered.
const syncQuiet = 250 * time.Millisecond

// ServerSync is one server's JetStream fsync setting, as the server
// reports it.
type ServerSync struct {
	Server string
	// Always: the server fsyncs each write before acknowledging it
	// (jetstream { sync_interval: always }).
	Always bool
	// Interval is how often a server that is not Always fsyncs what it
	// has written (nats-server's default: 2 minutes).
	Interval time.Duration
}

// SyncReport is what ReadServerSync learned of the servers' settings.
type SyncReport struct {
	// Servers that answered, by name.
	Servers []ServerSync
	// ClusterSize is the largest number of JetStream servers an answer
	// said its cluster has; 0 on a server outside a cluster.
	ClusterSize int
	// Unreadable, when no server answered, says why.
	Unreadable string
}

// ReadServerSync asks the servers nc reaches for their JetStream fsync
// setting and gathers the answers until every server known to have
// JetStream has answered, or none came for a moment, or ctx ends. It
// reports the servers that answered; it needs no JetStream and changes
// nothing. Where the connection's user may not ask, the report says why:
// no responders (the account neither is nor imports from the system
// account), a refused publish (the user's permissions), or no answer.
//
// On a connection whose user may not publish to SyncSubject, the server's
// refusal also reaches the connection's error handler.
func ReadServerSync(ctx context.Context, nc *nats.Conn) SyncReport {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return SyncReport{Unreadable: "subscribing to a reply inbox: " + err.Error()}
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(SyncSubject, inbox, nil); err != nil {
		return SyncReport{Unreadable: "asking " + SyncSubject + ": " + err.Error()}
	}
	// A refused publish comes back as an error before the flush's pong.
	if err := nc.FlushWithContext(ctx); err != nil {
		return SyncReport{Unreadable: "asking " + SyncSubject + ": " + err.Error()}
	}
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), SyncSubject) {
		return SyncReport{Unreadable: "this user may not publish to " + SyncSubject}
	}

	var r SyncReport
	answered := map[string]bool{}
	expected := map[string]bool{} // JetStream peers the answers named
	clustered := false
	got := 0 // answers, those that tell nothing included
	var reason string
	for {
		wait := ctx
		var stop context.CancelFunc = func() {}
		if got > 0 {
			// After the first answer, a short silence ends the wait.
			wait, stop = context.WithTimeout(ctx, syncQuiet)
		}
		m, err := sub.NextMsgWithContext(wait)
		stop()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			r.Unreadable = "no responders on " + SyncSubject + ": the account is not the system account and does not import it"
			return r
		case err != nil && len(answered) == 0:
			if reason != "" {
				r.Unreadable = "no answer on " + SyncSubject + " told the setting: " + reason
			} else {
				r.Unreadable = "no server answered on " + SyncSubject + ": " + err.Error()
			}
			return r
		case err != nil:
			return r.sorted()
		}
		got++
		s, size, peers, why := parseVarz(m.Data)
		if why != "" {
			reason = why
			continue
		}
		if s.Server == "" || answered[s.Server] {
			continue
		}
		answered[s.Server] = true
		r.Servers = append(r.Servers, s)
		r.ClusterSize = max(r.ClusterSize, size)
		if size > 0 {
			clustered = true
		}
		for _, p := range peers {
			expected[p] = true
		}
		if clustered && len(answered) >= r.ClusterSize && allIn(expected, answered) {
			return r.sorted()
		}
	}
}

func allIn(want, have map[string]bool) bool {
	for k := range want {
		if !have[k] {
			return false
		}
	}
	return true
}

func (r SyncReport) sorted() SyncReport {
	slices.SortFunc(r.Servers, func(a, b ServerSync) int { return strings.Compare(a.Server, b.Server) })
	return r
}

// varzAnswer is the part of a server's VARZ answer ReadServerSync reads.
type varzAnswer struct {
	Server struct {
		Name string `json:"name"`
	} `json:"server"`
	Data *struct {
		Name      string `json:"server_name"`
		JetStream struct {
			Config *struct {
				// nats-server encodes its time.Duration in nanoseconds.
				SyncInterval time.Duration `json:"sync_interval"`
				SyncAlways   bool          `json:"sync_always"`
			} `json:"config"`
			Meta *struct {
				Size     int `json:"cluster_size"`
				Replicas []struct {
					Name string `json:"name"`
				} `json:"replicas"`
			} `json:"meta"`
		} `json:"jetstream"`
	} `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// parseVarz reads one answer: the server's setting, the size of its
// JetStream cluster and the peers it knows of, or why the answer tells
// nothing (an error, a server without JetStream).
func parseVarz(b []byte) (s ServerSync, size int, peers []string, why string) {
	var a varzAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return s, 0, nil, "an answer that does not parse: " + err.Error()
	}
	if a.Error != nil {
		return s, 0, nil, "a server answered with an error: " + a.Error.Description
	}
	if a.Data == nil || a.Data.JetStream.Config == nil {
		return s, 0, nil, "a server without JetStream answered"
	}
	s.Server = a.Data.Name
	if s.Server == "" {
		s.Server = a.Server.Name
	}
	s.Always = a.Data.JetStream.Config.SyncAlways
	s.Interval = a.Data.JetStream.Config.SyncInterval
	if m := a.Data.JetStream.Meta; m != nil {
		size = m.Size
		for _, p := range m.Replicas {
			peers = append(peers, p.Name)
		}
	}
	return s, size, peers, ""
}

// SyncLevel grades a SyncReport.
type SyncLevel int

const (
	// SyncUnknown: some or all servers' settings could not be read; those
	// read fsync before acknowledging.
	SyncUnknown SyncLevel = iota
	// SyncSafe: every server fsyncs each write before acknowledging it.
	SyncSafe
	// SyncLazy: at least one server acknowledges writes before they are
	// on disk.
	SyncLazy
)

// SyncVerdict is what a SyncReport means for acknowledged writes, in words
// for an operator's log.
type SyncVerdict struct {
	Level SyncLevel
	// Message is one sentence: what was found and what to do.
	Message string
	// Servers lists each server's setting, "name: always" or "name: every
	// 2m0s"; empty when none answered.
	Servers string
	// Risk says what the deployment stands to lose, or why nothing was
	// checked.
	Risk string
}

// Verdict grades the report for streams with replicas replicas. It is pure:
// the same report gives the same words.
func (r SyncReport) Verdict(replicas int) SyncVerdict {
	replicas = max(replicas, 1)
	var v SyncVerdict
	var lazy []ServerSync
	parts := make([]string, 0, len(r.Servers))
	for _, s := range r.Servers {
		if s.Always {
			parts = append(parts, s.Server+": always")
			continue
		}
		lazy = append(lazy, s)
		parts = append(parts, s.Server+": every "+intervalText(s.Interval))
	}
	v.Servers = strings.Join(parts, "; ")
	missing := r.ClusterSize - len(r.Servers)
	switch {
	case len(lazy) > 0:
		v.Level = SyncLazy
		names := make([]string, len(lazy))
		window := time.Duration(0)
		for i, s := range lazy {
			names[i] = s.Server
			window = max(window, s.Interval)
		}
		v.Message = fmt.Sprintf("NATS %s %s JetStream writes before they are on disk: set jetstream { sync_interval: always } on every server",
			plural(len(lazy), "server", "servers"), strings.Join(names, ", ")+plural(len(lazy), " acknowledges", " acknowledge"))
		if replicas == 1 {
			v.Risk = fmt.Sprintf("with 1 replica, an OS crash or power loss of the server holding a stream can lose the writes it acknowledged in the last %s", intervalText(window))
		} else {
			v.Risk = fmt.Sprintf("with %d replicas, a power loss or OS crash of a majority of a stream's servers within %s of a write, "+
				"or of one of them together with process pauses or a network partition, can lose acknowledged writes (Jepsen, NATS 2.12.1)",
				replicas, intervalText(window))
		}
		if missing > 0 {
			v.Risk += fmt.Sprintf("; %d of %d servers did not answer", missing, r.ClusterSize)
		}
	case len(r.Servers) == 0:
		v.Level = SyncUnknown
		v.Message = "cannot read the NATS servers' fsync setting: acknowledged writes survive " +
			"an OS crash or power loss only if every server runs with jetstream { sync_interval: always }"
		v.Risk = r.Unreadable
		if v.Risk == "" {
			v.Risk = "no server answered"
		}
	case missing > 0:
		v.Level = SyncUnknown
		v.Message = fmt.Sprintf("%d of %d NATS servers answered, each fsyncing JetStream writes before acknowledging them; "+
			"the others' setting is unknown: every server needs jetstream { sync_interval: always }", len(r.Servers), r.ClusterSize)
		v.Risk = "a server that acknowledges before fsync can lose acknowledged writes in an OS crash or power loss"
	default:
		v.Level = SyncSafe
		v.Message = "every NATS server fsyncs JetStream writes before acknowledging them (sync_interval: always)"
	}
	return v
}

func intervalText(d time.Duration) string {
	if d <= 0 {
		return "2m0s (the default)"
	}
	return d.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
