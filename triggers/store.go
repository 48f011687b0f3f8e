package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
)

// Store is what the trigger store needs from the stream layer.
type Store interface {
	Subjects() streams.Subjects
	Append(ctx context.Context, p streams.Publication, expect uint64) (seq uint64, duplicate bool, err error)
	AppendBatch(ctx context.Context, entries []streams.BatchEntry) ([]uint64, error)
	Head(ctx context.Context, subject string) (*streams.Msg, error)
	NextOnSubject(ctx context.Context, subject string, seq uint64) (*streams.Msg, error)
	Read(ctx context.Context, filter string, from uint64, fn func(*streams.Msg) error) error
	Tail(ctx context.Context, s streams.Stream, filters []string, from uint64, fn func(m *streams.Msg, pending uint64) error) error
	Purge(ctx context.Context, filter string) error
	PurgeBefore(ctx context.Context, subject string, seq uint64) error
	// Verify vouches for a record (streams.Client.Verify).
	Verify(m *streams.Msg) error
	SignedHead(ctx context.Context, subject string) (*streams.Msg, uint64, error)
}

// tries bounds how often an operation re-reads after another writer moved
// the subscription; each try follows a write that landed.
const tries = 16

// Triggers reads and writes subscriptions, occurrences and deliveries.
type Triggers struct {
	s      Store
	writer string
	now    func() time.Time
}

// New returns a store whose writes name writer (a node id or an operator).
func New(s Store, writer string) *Triggers {
	return &Triggers{s: s, writer: writer, now: time.Now}
}

// Apply performs op within scope (nil: an operator, who sees every
// subscription; else the owner whose subscriptions it may change). The
// new state and the operation's receipt are stored in one atomic batch,
// so an operation took effect if and only if its receipt is there. The
// same operation again returns its receipt, whatever happened since;
// another operation under the same id is ErrConflict.
func (t *Triggers) Apply(ctx context.Context, op Op, scope *Owner) (*Receipt, error) {
	if err := op.Validate(); err != nil {
		return nil, err
	}
	if op.Action == ActRegister && scope != nil && op.Owner != *scope {
		return nil, fmt.Errorf("%w: %s may not register subscriptions of %s", ErrInvalid, scope, op.Owner)
	}
	subj := t.s.Subjects()
	rsubj, err := subj.TriggerReceipt(op.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: operation id: %v", ErrInvalid, err)
	}
	id := op.Subscription
	if op.Action == ActRegister {
		id = SubscriptionID(op.Owner, op.Key)
	}
	ssubj, err := subj.TriggerSubscription(id)
	if err != nil {
		return nil, fmt.Errorf("%w: subscription id: %v", ErrInvalid, err)
	}
	hash := op.Hash()
	for try := range tries {
		r, rat, err := t.receipt(ctx, rsubj)
		if err == nil {
			if r.OpHash != hash {
				return nil, fmt.Errorf("%w: operation %s was %s of %s", ErrConflict, clip(op.ID), r.Action, r.Subscription)
			}
			return r, nil
		} else if !errors.Is(err, streams.ErrNotFound) {
			return nil, err
		}
		cur, at, err := t.head(ctx, ssubj)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		next, changed, err := apply(cur, op, scope, t.writer, t.now().UTC())
		if err != nil {
			return nil, err
		}
		r = &Receipt{V: Version, Op: op.ID, OpHash: hash, Action: op.Action, Subscription: next.ID,
			Revision: next.Revision, Incarnation: next.Incarnation, Changed: changed, By: t.writer, At: t.now().UTC()}
		rb, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		entries := []streams.BatchEntry{{Publication: streams.Publication{Subject: rsubj, Data: rb}, Expect: streams.Expect(rat)}}
		if changed {
			sb, err := json.Marshal(next)
			if err != nil {
				return nil, err
			}
			entries = append([]streams.BatchEntry{{Publication: streams.Publication{Subject: ssubj, Data: sb}, Expect: &at}}, entries...)
		}
		_, err = t.s.AppendBatch(ctx, entries)
		var ce *streams.ConflictError
		if errors.As(err, &ce) {
			// Another writer moved the subscription or took the operation
			// id; on a cluster its write may not be readable yet.
			if err := backoff(ctx, try); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, fmt.Errorf("triggers: %s of %s: the subscription kept changing under %d tries", op.Action, id, tries)
}

// receipt reads the receipt on subject, and the subject's last sequence
// (what a compare-and-set names).
func (t *Triggers) receipt(ctx context.Context, subject string) (*Receipt, uint64, error) {
	m, at, err := signedHead(ctx, t.s, subject)
	if err != nil {
		return nil, at, err
	}
	var r Receipt
	if err := decode(m, &r); err != nil {
		return nil, at, err
	}
	return &r, at, nil
}

// head reads a subscription's current state, and the subject's last
// sequence (what a compare-and-set names).
func (t *Triggers) head(ctx context.Context, subject string) (*Subscription, uint64, error) {
	m, at, err := signedHead(ctx, t.s, subject)
	if errors.Is(err, streams.ErrNotFound) {
		return nil, at, fmt.Errorf("%w: %s", ErrNotFound, subject)
	}
	if err != nil {
		return nil, at, err
	}
	sub, err := decodeSubscription(m)
	return sub, at, err
}

// signedHead is Store.SignedHead: unsigned records on a subject change
// nothing and block nothing (ADR 0036).
func signedHead(ctx context.Context, s Store, subject string) (*streams.Msg, uint64, error) {
	return s.SignedHead(ctx, subject)
}

func decodeSubscription(m *streams.Msg) (*Subscription, error) {
	var s Subscription
	if err := json.Unmarshal(m.Data, &s); err != nil || s.V != Version || s.ID == "" {
		return nil, fmt.Errorf("%w: subscription state at %d on %s", ErrCorrupt, m.Seq, m.Subject)
	}
	s.Seq = m.Seq
	return &s, nil
}

// decode reads a record of this version.
func decode(m *streams.Msg, v any) error {
	var probe struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(m.Data, &probe); err != nil || probe.V != Version {
		return fmt.Errorf("%w: %s at %d (version %d)", ErrCorrupt, m.Subject, m.Seq, probe.V)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return fmt.Errorf("%w: %s at %d: %v", ErrCorrupt, m.Subject, m.Seq, err)
	}
	return nil
}

// Get returns a subscription's current state, if scope may see it.
func (t *Triggers) Get(ctx context.Context, id string, scope *Owner) (*Subscription, error) {
	subj, err := t.s.Subjects().TriggerSubscription(id)
	if err != nil {
		return nil, fmt.Errorf("%w: subscription id: %v", ErrInvalid, err)
	}
	s, _, err := t.head(ctx, subj)
	if err != nil {
		return nil, err
	}
	if scope != nil && s.Owner != *scope {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, subj)
	}
	return s, nil
}

// History returns every state of a subscription, the oldest first.
func (t *Triggers) History(ctx context.Context, id string, scope *Owner) ([]*Subscription, error) {
	if _, err := t.Get(ctx, id, scope); err != nil {
		return nil, err
	}
	subj, _ := t.s.Subjects().TriggerSubscription(id)
	var out []*Subscription
	err := t.s.Read(ctx, subj, 0, func(m *streams.Msg) error {
		if t.s.Verify(m) != nil {
			return nil
		}
		s, err := decodeSubscription(m)
		if err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// List returns the current state of every subscription scope may see, in
// id order; unreadable states are returned apart, by subject.
func (t *Triggers) List(ctx context.Context, scope *Owner) ([]*Subscription, map[string]error, error) {
	last := map[string]*Subscription{}
	bad := map[string]error{}
	err := t.s.Read(ctx, t.s.Subjects().AllTriggers("sub"), 0, func(m *streams.Msg) error {
		if t.s.Verify(m) != nil {
			return nil
		}
		s, err := decodeSubscription(m)
		if err != nil {
			bad[m.Subject] = err
			return nil
		}
		delete(bad, m.Subject)
		last[s.ID] = s
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var out []*Subscription
	for _, s := range last {
		if scope == nil || s.Owner == *scope {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *Subscription) int { return strings.Compare(a.ID, b.ID) })
	return out, bad, nil
}

// Record records occ with its deliveries to subs (each subscription as
// it stood when occ happened) in one atomic batch: the occurrence and all
// its reservations, or nothing. Recording an occurrence that is there
// already returns it as first recorded, with created false: an occurrence
// is matched once, and a subscription gets at most one delivery of it,
// forever.
func (t *Triggers) Record(ctx context.Context, occ Occurrence, subs []*Subscription) (*Occurrence, []*Delivery, bool, error) {
	subj := t.s.Subjects()
	osubj, err := subj.TriggerOccurrence(occ.ID)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: occurrence id: %v", ErrInvalid, err)
	}
	rest := occ.SourceType
	if occ.SourceKey != "" {
		rest += "." + occ.SourceKey
	}
	now := t.now().UTC()
	occ.V, occ.By, occ.At, occ.Deliveries, occ.Undelivered = Version, t.writer, now, nil, nil
	deliver, over := matching(subs, rest)
	var ds []*Delivery
	for _, s := range deliver {
		d, err := delivery(&occ, s, t.writer, now)
		if err != nil {
			return nil, nil, false, err
		}
		ds = append(ds, d)
		occ.Deliveries = append(occ.Deliveries, d.ID)
	}
	for _, s := range over {
		occ.Undelivered = append(occ.Undelivered, s.ID)
	}
	ob, err := json.Marshal(occ)
	if err != nil {
		return nil, nil, false, err
	}
	entries := []streams.BatchEntry{{Publication: streams.Publication{Subject: osubj, Data: ob}, Expect: streams.Expect(0)}}
	for _, d := range ds {
		dsubj, err := subj.TriggerDelivery(d.ID)
		if err != nil {
			return nil, nil, false, err
		}
		b, err := json.Marshal(d)
		if err != nil {
			return nil, nil, false, err
		}
		entries = append(entries, streams.BatchEntry{Publication: streams.Publication{Subject: dsubj, Data: b}, Expect: streams.Expect(0)})
	}
	for try := range tries {
		seqs, err := t.s.AppendBatch(ctx, entries)
		var ce *streams.ConflictError
		if errors.As(err, &ce) {
			first, err := t.Occurrence(ctx, occ.ID)
			if errors.Is(err, ErrNotFound) {
				// The batch that won is not readable yet (a cluster
				// reports the conflict before applying it), or what is
				// there no node wrote: the next try lands after it.
				if err := t.expectHeads(ctx, entries); err != nil {
					return nil, nil, false, err
				}
				// The heads read may be the winner's batch, applied
				// meanwhile: then it is the occurrence, not something to
				// write after.
				if first, err := t.Occurrence(ctx, occ.ID); err == nil {
					ds, err := t.deliveriesOf(ctx, first)
					return first, ds, false, err
				} else if !errors.Is(err, ErrNotFound) {
					return nil, nil, false, err
				}
				if err := backoff(ctx, try); err != nil {
					return nil, nil, false, err
				}
				continue
			}
			if err != nil {
				return nil, nil, false, err
			}
			ds, err := t.deliveriesOf(ctx, first)
			return first, ds, false, err
		}
		if err != nil {
			return nil, nil, false, err
		}
		for i, d := range ds {
			d.Seq = seqs[i+1]
		}
		return &occ, ds, true, nil
	}
	return nil, nil, false, fmt.Errorf("triggers: occurrence %s: conflicting writes never became readable in %d tries", occ.ID, tries)
}

// expectHeads sets each entry's compare-and-set to its subject's last
// sequence.
func (t *Triggers) expectHeads(ctx context.Context, entries []streams.BatchEntry) error {
	for i := range entries {
		m, err := t.s.Head(ctx, entries[i].Subject)
		switch {
		case errors.Is(err, streams.ErrNotFound):
			entries[i].Expect = streams.Expect(0)
		case err != nil:
			return err
		default:
			entries[i].Expect = streams.Expect(m.Seq)
		}
	}
	return nil
}

// backoff pauses after the try-th lost compare-and-set: 5 ms doubling,
// at most 200 ms.
func backoff(ctx context.Context, try int) error {
	d := min(5*time.Millisecond<<min(try, 6), 200*time.Millisecond)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Occurrence reads an occurrence.
func (t *Triggers) Occurrence(ctx context.Context, id string) (*Occurrence, error) {
	subj, err := t.s.Subjects().TriggerOccurrence(id)
	if err != nil {
		return nil, fmt.Errorf("%w: occurrence id: %v", ErrInvalid, err)
	}
	m, _, err := signedHead(ctx, t.s, subj)
	if errors.Is(err, streams.ErrNotFound) {
		return nil, fmt.Errorf("%w: occurrence %s", ErrNotFound, clip(id))
	}
	if err != nil {
		return nil, err
	}
	var o Occurrence
	if err := decode(m, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

func (t *Triggers) deliveriesOf(ctx context.Context, o *Occurrence) ([]*Delivery, error) {
	var out []*Delivery
	for _, id := range o.Deliveries {
		d, err := t.Delivery(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Delivery reads a delivery and whether its process was started.
func (t *Triggers) Delivery(ctx context.Context, id string) (*Delivery, error) {
	subj, err := t.s.Subjects().TriggerDelivery(id)
	if err != nil {
		return nil, fmt.Errorf("%w: delivery id: %v", ErrInvalid, err)
	}
	var d *Delivery
	err = t.s.Read(ctx, subj, 0, func(m *streams.Msg) error {
		if t.s.Verify(m) != nil {
			return nil
		}
		return foldDelivery(&d, m)
	})
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("%w: delivery %s", ErrNotFound, clip(id))
	}
	return d, nil
}

// foldDelivery folds one message of a delivery's subject into *d.
func foldDelivery(d **Delivery, m *streams.Msg) error {
	if *d == nil {
		var r Delivery
		if err := decode(m, &r); err != nil {
			return err
		}
		r.Seq = m.Seq
		*d = &r
		return nil
	}
	var mk startMark
	if err := decode(m, &mk); err != nil {
		return err
	}
	(*d).Started, (*d).Failed, (*d).StartedAt, (*d).StartedBy = mk.Started, mk.Error, mk.At, mk.By
	return nil
}

// Start registers a delivery's process (idempotent: its id is the
// delivery's) and marks the delivery started. Any node may do it, any
// number of times: one process results.
//
// A registration the registry refuses for good (invalid, or the id taken
// by another registration) marks the delivery failed with the reason, so
// no sweep tries it again, and returns the error.
func (t *Triggers) Start(ctx context.Context, procs *processes.Registry, d *Delivery) error {
	if d.Started || d.Failed != "" {
		return nil
	}
	mark := startMark{V: Version, Started: true, Process: d.Process, By: t.writer, At: t.now().UTC()}
	_, _, rerr := procs.Register(ctx, d.Process, d.Registration)
	switch {
	case errors.Is(rerr, processes.ErrInvalid) || errors.Is(rerr, processes.ErrConflict):
		mark.Started, mark.Error = false, clipText(rerr.Error())
	case rerr != nil:
		return fmt.Errorf("triggers: starting delivery %s: %w", d.ID, rerr)
	}
	subj, err := t.s.Subjects().TriggerDelivery(d.ID)
	if err != nil {
		return err
	}
	b, err := json.Marshal(mark)
	if err != nil {
		return err
	}
	if err := t.mark(ctx, subj, d, b); err != nil {
		return err
	}
	d.Started, d.Failed = mark.Started, mark.Error
	if rerr != nil {
		return fmt.Errorf("triggers: delivery %s cannot start: %w", d.ID, rerr)
	}
	return nil
}

// mark appends a delivery's start mark after its reservation. Another
// node's mark there first is as good; messages after the reservation that
// no node wrote are passed over, the mark landing after them.
func (t *Triggers) mark(ctx context.Context, subj string, d *Delivery, b []byte) error {
	at := d.Seq
	for try := range tries {
		_, _, err := t.s.Append(ctx, streams.Publication{Subject: subj, Data: b}, at)
		var ce *streams.ConflictError
		if !errors.As(err, &ce) {
			return err
		}
		cur, err := t.Delivery(ctx, d.ID)
		if err != nil {
			return err
		}
		if cur.Started || cur.Failed != "" {
			return nil
		}
		if _, at, err = signedHead(ctx, t.s, subj); err != nil {
			return err
		}
		if err := backoff(ctx, try); err != nil {
			return err
		}
	}
	return fmt.Errorf("triggers: marking delivery %s: the subject kept changing under %d tries", clip(d.ID), tries)
}

// Occurrences returns every occurrence recorded at or after stream
// sequence from, oldest first, at most limit (0: all).
func (t *Triggers) Occurrences(ctx context.Context, from uint64, limit int) ([]*Occurrence, error) {
	var out []*Occurrence
	err := t.s.Read(ctx, t.s.Subjects().AllTriggers("occ"), from, func(m *streams.Msg) error {
		var o Occurrence
		if t.s.Verify(m) != nil || decode(m, &o) != nil {
			return nil // listed by lash-admin as unreadable elsewhere
		}
		out = append(out, &o)
		if limit > 0 && len(out) >= limit {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return out, err
}

// Deliveries returns every delivery, oldest first, with whether each was
// started.
func (t *Triggers) Deliveries(ctx context.Context) ([]*Delivery, error) {
	byID := map[string]*Delivery{}
	var order []string
	err := t.s.Read(ctx, t.s.Subjects().AllTriggers("dlv"), 0, func(m *streams.Msg) error {
		id, err := idOf(m.Subject)
		if err != nil {
			return nil
		}
		d := byID[id]
		if t.s.Verify(m) != nil {
			return nil
		}
		if err := foldDelivery(&d, m); err != nil {
			return nil
		}
		if _, ok := byID[id]; !ok {
			order = append(order, id)
		}
		byID[id] = d
		return nil
	})
	out := make([]*Delivery, 0, len(order))
	for _, id := range order {
		out = append(out, byID[id])
	}
	return out, err
}

var errEnough = errors.New("enough")

// idOf returns the id in a trigger subject's last token.
func idOf(subject string) (string, error) {
	return streams.ParseToken(subject[strings.LastIndexByte(subject, '.')+1:])
}
