package triggers

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
)

// The pure rules: how an operation changes a subscription, which
// subscriptions an occurrence matches, and what each delivery starts.

// apply returns the state op leaves cur in (cur is nil for a subscription
// never registered), and whether anything changed. It checks the
// caller's scope: a session owner sees only its own subscriptions.
func apply(cur *Subscription, op Op, scope *Owner, by string, now time.Time) (*Subscription, bool, error) {
	if cur != nil && scope != nil && cur.Owner != *scope {
		cur = nil // another owner's: as if it did not exist
	}
	if op.Action == ActRegister {
		spec, err := op.Spec.canonical()
		if err != nil {
			return nil, false, err
		}
		if cur == nil {
			return &Subscription{V: Version, ID: SubscriptionID(op.Owner, op.Key), Owner: op.Owner, Key: op.Key,
				Spec: spec, Revision: 1, Incarnation: 1, Enabled: true, Action: ActRegister, Op: op.ID, By: by, At: now}, true, nil
		}
		switch {
		case cur.Deleted:
			return nil, false, fmt.Errorf("%w: %s (revive it)", ErrDeleted, cur.ID)
		case cur.Spec.Hash() != spec.Hash():
			return nil, false, fmt.Errorf("%w: %s is registered with another definition (update it at revision %d)", ErrConflict, cur.ID, cur.Revision)
		}
		return cur, false, nil
	}
	if cur == nil {
		return nil, false, fmt.Errorf("%w: subscription %s", ErrNotFound, clip(op.Subscription))
	}
	if op.Revision != 0 && op.Revision != cur.Revision {
		return nil, false, fmt.Errorf("%w: %s is at revision %d, not %d", ErrStale, cur.ID, cur.Revision, op.Revision)
	}
	if cur.Deleted && op.Action != ActRevive && op.Action != ActDelete {
		return nil, false, fmt.Errorf("%w: %s", ErrDeleted, cur.ID)
	}
	next := *cur
	next.Action, next.Op, next.By, next.At, next.Seq = op.Action, op.ID, by, now, 0
	switch op.Action {
	case ActUpdate:
		spec, err := op.Spec.canonical()
		if err != nil {
			return nil, false, err
		}
		if spec.Hash() == cur.Spec.Hash() {
			return cur, false, nil
		}
		next.Spec = spec
	case ActEnable, ActDisable:
		if cur.Enabled == (op.Action == ActEnable) {
			return cur, false, nil
		}
		next.Enabled = op.Action == ActEnable
	case ActDelete:
		if cur.Deleted {
			return cur, false, nil
		}
		next.Deleted, next.Enabled = true, false
	case ActRevive:
		if !cur.Deleted {
			return cur, false, nil
		}
		next.Deleted, next.Enabled = false, true
		next.Incarnation++
	}
	if cur.Revision >= MaxRevisions {
		return nil, false, fmt.Errorf("%w: %s has %d revisions, the most a subscription takes (delete it and register another key)", ErrInvalid, cur.ID, MaxRevisions)
	}
	next.Revision++
	return &next, true, nil
}

// Validate checks an operation before anything is read or written.
func (op Op) Validate() error {
	if op.ID == "" || len(op.ID) > MaxKeyBytes {
		return fmt.Errorf("%w: an operation needs an id of at most %d bytes", ErrInvalid, MaxKeyBytes)
	}
	switch op.Action {
	case ActRegister:
		if err := op.Owner.validate(); err != nil {
			return err
		}
		if op.Key == "" || len(op.Key) > MaxKeyBytes {
			return fmt.Errorf("%w: a subscription needs a key of at most %d bytes", ErrInvalid, MaxKeyBytes)
		}
		if op.Subscription != "" || op.Revision != 0 {
			return fmt.Errorf("%w: register names its subscription by owner and key", ErrInvalid)
		}
	case ActUpdate, ActEnable, ActDisable, ActDelete, ActRevive:
		if err := streams.CheckID(op.Subscription); err != nil {
			return fmt.Errorf("%w: subscription: %v", ErrInvalid, err)
		}
		if op.Action == ActUpdate && op.Revision == 0 {
			return fmt.Errorf("%w: update needs the revision it changes", ErrInvalid)
		}
		if op.Key != "" || op.Owner != (Owner{}) {
			return fmt.Errorf("%w: %s names its subscription by id", ErrInvalid, op.Action)
		}
	default:
		return fmt.Errorf("%w: action %q", ErrInvalid, op.Action)
	}
	if (op.Action == ActRegister || op.Action == ActUpdate) != (op.Spec != nil) {
		return fmt.Errorf("%w: register and update take a spec, other actions none", ErrInvalid)
	}
	if op.Spec != nil {
		return op.Spec.validate()
	}
	return nil
}

// Match reports whether a subject below "<prefix>.signal." (its tokens
// after that prefix) matches a pattern with NATS wildcards.
func Match(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case p != "*" && p != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}

// MaxSourceBytes bounds a signal's subject after "<prefix>.signal.".
const MaxSourceBytes = 1024

// Source splits a subject below "<prefix>.signal." into its source type
// (the first token) and key (the rest, possibly empty).
func Source(rest string) (typ, key string, err error) {
	if rest == "" || len(rest) > MaxSourceBytes {
		return "", "", fmt.Errorf("%w: signal subject", ErrInvalid)
	}
	typ, key, _ = strings.Cut(rest, ".")
	return typ, key, nil
}

// matching returns the subscriptions (as of the occurrence) that it is
// delivered to, in id order, and those past MaxFanOut.
func matching(subs []*Subscription, rest string) (deliver, over []*Subscription) {
	for _, s := range subs {
		if s.Live() && Match(s.Spec.Pattern(), rest) {
			deliver = append(deliver, s)
		}
	}
	slices.SortFunc(deliver, func(a, b *Subscription) int { return strings.Compare(a.ID, b.ID) })
	if len(deliver) > MaxFanOut {
		deliver, over = deliver[:MaxFanOut], deliver[MaxFanOut:]
	}
	return deliver, over
}

// Event is what a delivered process is given about its occurrence: a
// tool call gets it as one argument (Target.PayloadArg). A tool written
// with tools.Func declares the payload as any: a json.RawMessage field
// would be described to the schema as an array.
type Event struct {
	Occurrence string          `json:"occurrence"`
	Subject    string          `json:"subject"`
	Payload    json.RawMessage `json:"payload"`
}

// delivery builds the delivery of occ to sub: the process it starts, from
// the subscription's state matched.
func delivery(occ *Occurrence, sub *Subscription, by string, now time.Time) (*Delivery, error) {
	id := DeliveryID(occ.ID, sub.ID, sub.Incarnation, sub.Revision)
	ev := Event{Occurrence: occ.ID, Subject: occ.Subject, Payload: occ.Payload}
	st := sub.Spec.Start
	in := processes.Input{Kind: st.Kind}
	switch st.Kind {
	case processes.ToolCall:
		args := map[string]json.RawMessage{}
		if len(st.Args) > 0 {
			if err := json.Unmarshal(st.Args, &args); err != nil {
				return nil, fmt.Errorf("%w: args of %s: %v", ErrCorrupt, sub.ID, err)
			}
		}
		name := st.PayloadArg
		if name == "" {
			name = "event"
		}
		if name != "-" {
			b, err := json.Marshal(ev)
			if err != nil {
				return nil, err
			}
			args[name] = b
		}
		var err error
		if in.Args, err = json.Marshal(args); err != nil {
			return nil, err
		}
		in.Tool = st.Tool
	case processes.SessionTurn:
		in.Session, in.Depth = "trig-"+id[len("dlv-"):], 1
		in.Instructions = fmt.Sprintf("%s\n\nEvent %s (occurrence %s):\n%s", st.Instructions, occ.Subject, occ.ID, occ.Payload)
		in.Tools = st.Tools
	}
	prov := processes.Provenance{Host: by}
	if sub.Owner.Kind == Session {
		prov = processes.Provenance{Session: sub.Owner.ID}
	}
	label := sub.Spec.Label
	if label == "" {
		label = "trigger " + sub.Key
	}
	reg := processes.Registration{Input: in, Disposition: processes.Rerunnable, Provenance: prov,
		WakeTarget: sub.Spec.WakeTarget, Label: clipText(label)}
	return &Delivery{V: Version, ID: id, Occurrence: occ.ID, Subscription: sub.ID, Incarnation: sub.Incarnation,
		Revision: sub.Revision, Process: id, Registration: reg, By: by, At: now}, nil
}

func clipText(s string) string {
	if len(s) <= processes.MaxTextBytes {
		return s
	}
	return s[:processes.MaxTextBytes]
}
