package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// FaultKind is one kind of fault the harness injects.
type FaultKind string

const (
	// PartitionNode holds a node's traffic with every server, both ways:
	// it keeps running and believes it holds its leases.
	PartitionNode FaultKind = "partition-node"
	// OneWayNode holds one direction only: the node's requests reach the
	// servers and their answers do not, or the other way.
	OneWayNode FaultKind = "one-way-node"
	// PartitionServer holds a server's routes to the other servers.
	PartitionServer FaultKind = "partition-server"
	// SlowLinks adds latency and jitter to every link of a node and of a
	// server: messages arrive late and between servers out of step.
	SlowLinks FaultKind = "slow-links"
	// CutLinks closes every connection of a node and every route of a
	// server at once; they reconnect.
	CutLinks FaultKind = "cut-links"
	// KillNode is SIGKILL of a node, started again after the hold.
	KillNode FaultKind = "kill-node"
	// PauseNode is SIGSTOP of a node for longer than its lease TTL, then
	// SIGCONT: the paused holder wakes and tries to write.
	PauseNode FaultKind = "pause-node"
	// KillServer is SIGKILL of the server leading the sessions stream,
	// started again after the hold.
	KillServer FaultKind = "kill-server"
)

// FaultKinds lists every kind; a schedule injects each at least once
// before it repeats any.
var FaultKinds = []FaultKind{PartitionNode, OneWayNode, PartitionServer, SlowLinks, CutLinks, KillNode, PauseNode, KillServer}

// Fault is one fault of a step.
type Fault struct {
	Kind FaultKind `json:"kind"`
	// Node or Server it hits (KillServer picks the stream leader when it
	// runs, so Server is -1 there).
	Node   int `json:"node"`
	Server int `json:"server"`
	// Dir is the held direction of a OneWayNode.
	Dir Direction `json:"dir,omitempty"`
	// Delay and Jitter of SlowLinks.
	Delay  time.Duration `json:"delay,omitempty"`
	Jitter time.Duration `json:"jitter,omitempty"`
}

func (f Fault) String() string {
	switch f.Kind {
	case PartitionNode, KillNode, PauseNode:
		return fmt.Sprintf("%s n%d", f.Kind, f.Node)
	case OneWayNode:
		way := "to servers"
		if f.Dir == Down {
			way = "from servers"
		}
		return fmt.Sprintf("%s n%d (%s held)", f.Kind, f.Node, way)
	case PartitionServer:
		return fmt.Sprintf("%s s%d", f.Kind, f.Server)
	case SlowLinks:
		return fmt.Sprintf("%s n%d s%d (%s ± %s)", f.Kind, f.Node, f.Server, f.Delay, f.Jitter)
	case CutLinks:
		return fmt.Sprintf("%s n%d s%d", f.Kind, f.Node, f.Server)
	case KillServer:
		return fmt.Sprintf("%s (the sessions stream's leader)", f.Kind)
	}
	return string(f.Kind)
}

// Step is a set of faults injected together at At (from the start of the
// run) and healed Hold later.
type Step struct {
	At     time.Duration `json:"at"`
	Hold   time.Duration `json:"hold"`
	Faults []Fault       `json:"faults"`
}

func (s Step) String() string {
	var fs []string
	for _, f := range s.Faults {
		fs = append(fs, f.String())
	}
	return fmt.Sprintf("at %s for %s: %s", s.At.Round(time.Millisecond), s.Hold.Round(time.Millisecond), strings.Join(fs, " + "))
}

// Schedule is the seeded plan of a run of length: steps with a quiet gap
// between them, each kind once first (in a seeded order), then any, and
// after the first round now and then a node fault and a server fault
// together. lease is the nodes' lease TTL: a pause outlasts it. With
// kinds, only those, one at a time. The same seed gives the same schedule.
func Schedule(seed uint64, length, lease time.Duration, nodes, servers int, kinds ...FaultKind) []Step {
	rng := rand.New(rand.NewPCG(seed, 35))
	only := len(kinds) > 0
	if !only {
		kinds = FaultKinds
	}
	first := append([]FaultKind(nil), kinds...)
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	var steps []Step
	at := 2 * time.Second
	for i := 0; ; i++ {
		var kind FaultKind
		if i < len(first) {
			kind = first[i]
		} else {
			kind = kinds[rng.IntN(len(kinds))]
		}
		hold := time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
		faults := []Fault{fault(rng, kind, nodes, servers)}
		if kind == PauseNode {
			hold = lease + time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		}
		if !only && i >= len(first) && rng.IntN(4) == 0 {
			// A second fault on the other side: a node's and a server's.
			other := []FaultKind{PartitionServer, KillServer, SlowLinks}
			if serverFault(kind) {
				other = []FaultKind{PartitionNode, KillNode, PauseNode, OneWayNode}
			}
			faults = append(faults, fault(rng, other[rng.IntN(len(other))], nodes, servers))
			if faults[1].Kind == PauseNode {
				hold = max(hold, lease+time.Second)
			}
		}
		if at+hold > length {
			break
		}
		steps = append(steps, Step{At: at, Hold: hold, Faults: faults})
		at += hold + 500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
	}
	return steps
}

func serverFault(k FaultKind) bool {
	return k == PartitionServer || k == KillServer || k == SlowLinks || k == CutLinks
}

func fault(rng *rand.Rand, kind FaultKind, nodes, servers int) Fault {
	f := Fault{Kind: kind, Node: rng.IntN(nodes), Server: rng.IntN(servers)}
	switch kind {
	case OneWayNode:
		f.Dir = Up
		if rng.IntN(2) == 0 {
			f.Dir = Down
		}
	case SlowLinks:
		f.Delay = time.Duration(5+rng.IntN(45)) * time.Millisecond
		f.Jitter = time.Duration(1+rng.IntN(50)) * time.Millisecond
	case KillServer:
		f.Server = -1
	}
	return f
}
