package chaos

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// This file is a sequential specification of the lease bucket (package
// streams: KVCreate, KVSwap, KVDelete, KVGet) for porcupine, so that a
// history of calls made by clients under faults can be checked for
// linearizability. Each key is its own object: porcupine checks the keys
// apart (P-compositionality), so the state below is that of one key.
//
// What it abstracts:
//
//   - A live value's TTL. Tests write keys with a TTL far longer than the
//     run, so no live value expires while it is checked; a value that did
//     expire would show up as a violation, not be excused.
//   - The delete marker's TTL. KVDelete leaves a marker that the server
//     removes about a second later, after which the key's subject is empty.
//     The model lets a marker vanish at any moment, without timing: it
//     branches into "still there" and "gone" before every step (porcupine's
//     nondeterministic model). Only a swap at the marker's revision can
//     tell the two apart; every other call treats them alike.
//   - Revisions. A revision is a stream sequence, shared by all keys; the
//     model checks only that each key's revisions strictly grow.
//   - Ambiguity. A write without an answer may take effect at any moment
//     after its call (LeaseUnknown), and a refusal the leader decided
//     against a write still in flight is no evidence (LeaseInFlight).

// LeaseOpKind is the call a lease bucket client made.
type LeaseOpKind uint8

const (
	// LeaseCreate writes Value if the key holds no live value (KVCreate).
	LeaseCreate LeaseOpKind = iota + 1
	// LeaseSwap writes Value if the key's last revision is Rev (KVSwap):
	// a live value's, or a delete marker's while it stands. Rev 0 asks
	// for a key with nothing on its subject.
	LeaseSwap
	// LeaseDelete leaves a delete marker if the key's last revision is
	// Rev (KVDelete).
	LeaseDelete
	// LeaseGet reads the live value (KVGet).
	LeaseGet
)

func (k LeaseOpKind) String() string {
	switch k {
	case LeaseCreate:
		return "create"
	case LeaseSwap:
		return "swap"
	case LeaseDelete:
		return "delete"
	case LeaseGet:
		return "get"
	}
	return "op" + strconv.Itoa(int(k))
}

// LeaseInput is one call. Values must be unique per write, so that a read
// names the write it saw.
type LeaseInput struct {
	Op    LeaseOpKind
	Key   string
	Value string // create, swap
	Rev   uint64 // swap, delete: the expected revision
}

// LeaseOutcome is how a call ended, as its client saw it.
type LeaseOutcome uint8

const (
	// LeaseOK: a write took effect at Rev; a get read Value at Rev.
	LeaseOK LeaseOutcome = iota + 1
	// LeaseRefused: a write was refused by its condition (the key exists,
	// the revision is not the expected one). It took no effect.
	LeaseRefused
	// LeaseAbsent: a get found no live value.
	LeaseAbsent
	// LeaseInFlight: a write refused because another write to the key
	// was still in flight at the bucket's leader (server code 10164). It
	// took no effect, but says nothing of the key: the leader decides it
	// against a write it has not committed, which may yet fail, and reads
	// still see the revision the refused write expected until that write
	// commits. The model accepts it in any state.
	LeaseInFlight
	// LeaseUnknown: a write whose answer never came (timeout, lost
	// connection, any error other than a refusal). It may have taken
	// effect, at any moment after its call, even after later calls
	// returned: record it with a return time after every other call's.
	// A get without an answer constrains nothing; leave it out.
	LeaseUnknown
)

func (o LeaseOutcome) String() string {
	switch o {
	case LeaseOK:
		return "ok"
	case LeaseRefused:
		return "refused"
	case LeaseAbsent:
		return "absent"
	case LeaseInFlight:
		return "refused-in-flight"
	case LeaseUnknown:
		return "unknown"
	}
	return "outcome" + strconv.Itoa(int(o))
}

// LeaseOutput is what a call returned.
type LeaseOutput struct {
	Outcome LeaseOutcome
	Rev     uint64 // LeaseOK: the write's revision, or the revision read
	Value   string // LeaseOK get: the value read
}

// leaseKind is what a key's subject holds.
type leaseKind uint8

const (
	leaseEmpty  leaseKind = iota // nothing: never written, or the marker expired
	leaseMarker                  // a delete marker, until it expires
	leaseLive                    // a value
)

// leaseState is one key. It is compared with ==.
type leaseState struct {
	Kind  leaseKind
	Value string // leaseLive
	// Rev is the revision of the live value or the marker; 0 when a write
	// of unknown outcome made it, until a read or a write at it pins it.
	Rev uint64
	// Floor is the highest revision the key is known to have reached:
	// every later write gets a larger one.
	Floor uint64
}

func (s leaseState) String() string {
	rev := "?"
	if s.Rev != 0 {
		rev = strconv.FormatUint(s.Rev, 10)
	}
	switch s.Kind {
	case leaseLive:
		return fmt.Sprintf("%q@%s", s.Value, rev)
	case leaseMarker:
		return "deleted@" + rev
	}
	return "empty"
}

// at reports whether a conditional write expecting rev may find it: surely
// when the revision is known and equal, possibly when it is unknown (a
// revision above the floor).
func (s leaseState) at(rev uint64) bool {
	switch {
	case s.Kind == leaseEmpty:
		return rev == 0
	case rev == 0:
		return false
	case s.Rev == 0:
		return rev > s.Floor
	}
	return s.Rev == rev
}

// surelyAt reports whether a conditional write expecting rev must find it.
func (s leaseState) surelyAt(rev uint64) bool {
	if s.Kind == leaseEmpty {
		return rev == 0
	}
	return s.Rev != 0 && s.Rev == rev
}

// wrote is the state after a write of kind at revision rev (0: unknown),
// which found the key at revision found.
func (s leaseState) wrote(kind leaseKind, value string, rev, found uint64) leaseState {
	floor := max(s.Floor, found, rev)
	return leaseState{Kind: kind, Value: value, Rev: rev, Floor: floor}
}

// leaseStep is the model's step from one state, after any marker
// expiry: the states the call can leave, none if it cannot have returned
// what it did.
func leaseStep(s leaseState, in LeaseInput, out LeaseOutput) []leaseState {
	if out.Outcome == LeaseInFlight && in.Op != LeaseGet {
		return []leaseState{s}
	}
	switch in.Op {
	case LeaseCreate:
		switch out.Outcome {
		case LeaseOK:
			if s.Kind != leaseLive && out.Rev > s.Floor {
				return []leaseState{s.wrote(leaseLive, in.Value, out.Rev, 0)}
			}
		case LeaseRefused:
			if s.Kind == leaseLive {
				return []leaseState{s}
			}
		case LeaseUnknown:
			// Landed here if it could; a create that never landed is the
			// same as one linearized after every other call.
			if s.Kind != leaseLive {
				return []leaseState{s.wrote(leaseLive, in.Value, 0, 0)}
			}
			return []leaseState{s}
		}
	case LeaseSwap, LeaseDelete:
		kind, value := leaseLive, in.Value
		if in.Op == LeaseDelete {
			kind, value = leaseMarker, ""
		}
		switch out.Outcome {
		case LeaseOK:
			if s.at(in.Rev) && out.Rev > max(in.Rev, s.Floor) {
				return []leaseState{s.wrote(kind, value, out.Rev, in.Rev)}
			}
		case LeaseRefused:
			if !s.surelyAt(in.Rev) {
				return []leaseState{s}
			}
		case LeaseUnknown:
			if s.at(in.Rev) {
				return []leaseState{s.wrote(kind, value, 0, in.Rev)}
			}
			return []leaseState{s}
		}
	case LeaseGet:
		switch out.Outcome {
		case LeaseOK:
			if s.Kind == leaseLive && s.Value == out.Value && s.at(out.Rev) {
				return []leaseState{s.wrote(leaseLive, s.Value, out.Rev, 0)}
			}
		case LeaseAbsent:
			if s.Kind != leaseLive {
				return []leaseState{s}
			}
		}
	}
	return nil
}

// LeaseModel is the porcupine model of the lease bucket, partitioned by
// key. Operations carry a LeaseInput and a LeaseOutput.
var LeaseModel = leaseModel.ToModel()

var leaseModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string]int{}
		var parts [][]porcupine.Operation
		for _, op := range history {
			key := op.Input.(LeaseInput).Key
			i, ok := byKey[key]
			if !ok {
				i = len(parts)
				byKey[key] = i
				parts = append(parts, nil)
			}
			parts[i] = append(parts[i], op)
		}
		return parts
	},
	Init: func() []interface{} { return []interface{}{leaseState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		s := state.(leaseState)
		before := []leaseState{s}
		if s.Kind == leaseMarker {
			// The marker may have expired since the last step; its
			// revision stays in the floor.
			before = append(before, leaseState{Kind: leaseEmpty, Floor: s.Floor})
		}
		var next []interface{}
		for _, b := range before {
			for _, n := range leaseStep(b, input.(LeaseInput), output.(LeaseOutput)) {
				next = append(next, n)
			}
		}
		return next
	},
	Hash: func(state interface{}) uint64 {
		s := state.(leaseState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%d|%s|%d|%d", s.Kind, s.Value, s.Rev, s.Floor)
		return h.Sum64()
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(LeaseInput), output.(LeaseOutput)
		var call string
		switch in.Op {
		case LeaseCreate:
			call = fmt.Sprintf("create(%s, %q)", in.Key, in.Value)
		case LeaseSwap:
			call = fmt.Sprintf("swap(%s, %q, @%d)", in.Key, in.Value, in.Rev)
		case LeaseDelete:
			call = fmt.Sprintf("delete(%s, @%d)", in.Key, in.Rev)
		default:
			call = fmt.Sprintf("%s(%s)", in.Op, in.Key)
		}
		switch {
		case out.Outcome == LeaseOK && in.Op == LeaseGet:
			return fmt.Sprintf("%s -> %q@%d", call, out.Value, out.Rev)
		case out.Outcome == LeaseOK:
			return fmt.Sprintf("%s -> @%d", call, out.Rev)
		}
		return call + " -> " + out.Outcome.String()
	},
	DescribeState: func(state interface{}) string { return state.(leaseState).String() },
}
