package triggers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lash-run/lash/streams"
)

// Pruned counts what Prune removed.
type Pruned struct {
	Occurrences, Deliveries, Signals, Receipts, Subscriptions int
}

// Prune removes the trigger records nothing will read again, once older
// than cutoff (ADR 0035):
//
//   - an occurrence whose every delivery is done with (its process is no
//     longer registered, or its registration failed for good), with its
//     deliveries and the signal it came from;
//   - an operation's receipt (the same operation id after cutoff applies
//     again);
//   - a subscription deleted (its tombstone and history).
//
// registered says whether a process is still on the PROCESSES stream. A
// reservation without a started mark is left for the sweep that starts it.
func (t *Triggers) Prune(ctx context.Context, cutoff time.Time, registered func(pid string) bool) (Pruned, error) {
	var out Pruned
	subj := t.s.Subjects()
	var old []*Occurrence
	err := t.s.Read(ctx, subj.AllTriggers("occ"), 0, func(m *streams.Msg) error {
		var o Occurrence
		if t.s.Verify(m) == nil && decode(m, &o) == nil && o.At.Before(cutoff) {
			old = append(old, &o)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	// Every delivery, in one read: a read per occurrence would cost a
	// consumer each.
	byID := map[string]*Delivery{}
	bad := map[string]bool{}
	if len(old) > 0 {
		err = t.s.Read(ctx, subj.AllTriggers("dlv"), 0, func(m *streams.Msg) error {
			if t.s.Verify(m) != nil {
				return nil
			}
			var d *Delivery
			if cur, ok := byID[m.Subject]; ok {
				d = cur
			}
			if err := foldDelivery(&d, m); err != nil {
				bad[m.Subject] = true
				return nil
			}
			byID[m.Subject] = d
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	for _, o := range old {
		// A delivery no longer on the stream (an earlier prune cut short)
		// is done with; an unreadable one is left for an operator.
		var ds []*Delivery
		readable := true
		for _, id := range o.Deliveries {
			s, err := subj.TriggerDelivery(id)
			if err != nil || bad[s] {
				readable = false
				break
			}
			if d := byID[s]; d != nil {
				ds = append(ds, d)
			}
		}
		if !readable {
			continue
		}
		done := true
		for _, d := range ds {
			if d.Failed == "" && (!d.Started || registered(d.Process)) {
				done = false
				break
			}
		}
		if !done {
			continue
		}
		for _, d := range ds {
			s, _ := subj.TriggerDelivery(d.ID)
			if err := t.s.Purge(ctx, s); err != nil {
				return out, err
			}
			out.Deliveries++
		}
		// The signal, and any older one on its subject: all delivered.
		if o.Signal > 0 && strings.HasPrefix(o.Subject, strings.TrimSuffix(subj.Signals(), ">")) {
			if err := t.s.PurgeBefore(ctx, o.Subject, o.Signal+1); err != nil {
				return out, err
			}
			out.Signals++
		}
		s, _ := subj.TriggerOccurrence(o.ID)
		if err := t.s.Purge(ctx, s); err != nil {
			return out, err
		}
		out.Occurrences++
	}
	var receipts []string
	err = t.s.Read(ctx, subj.AllTriggers("op"), 0, func(m *streams.Msg) error {
		var r Receipt
		if t.s.Verify(m) == nil && decode(m, &r) == nil && r.At.Before(cutoff) {
			receipts = append(receipts, m.Subject)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	for _, s := range receipts {
		if err := t.s.Purge(ctx, s); err != nil {
			return out, err
		}
		out.Receipts++
	}
	last := map[string]*Subscription{}
	err = t.s.Read(ctx, subj.AllTriggers("sub"), 0, func(m *streams.Msg) error {
		var s Subscription
		if t.s.Verify(m) == nil && decode(m, &s) == nil {
			last[m.Subject] = &s
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	for s, sub := range last {
		if sub.Deleted && sub.At.Before(cutoff) {
			if err := t.s.Purge(ctx, s); err != nil {
				return out, fmt.Errorf("pruning subscription %s: %w", sub.ID, err)
			}
			out.Subscriptions++
		}
	}
	return out, nil
}
