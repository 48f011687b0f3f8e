package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
)

// RouterConfig configures a Router.
type RouterConfig struct {
	Triggers *Triggers
	Registry *processes.Registry
	Store    Store
	Logger   *slog.Logger
	// SweepEvery is how often reservations whose process was never
	// registered are looked for (default 5 s); SweepAfter is how old one
	// must be before the sweep takes it from the node that reserved it
	// (default 10 s).
	SweepEvery, SweepAfter time.Duration
	// Forget is how long after its deletion a subscription's history stays
	// in the index (default DefaultForget): as long as a sweep keeps it on
	// the stream, so a router that ran for months knows what one started
	// today does, and no more. SetForget changes it.
	Forget time.Duration
	// AfterReserve, if set, runs after an occurrence's reservations are
	// stored and before any of their processes is registered: tests stop a
	// node there.
	AfterReserve func(*Occurrence)
}

// Router delivers signals to subscriptions. It follows the subscriptions
// and deliveries on the TRIGGERS stream, so it can match a signal against
// the subscriptions as they stood when the signal was stored, and finds
// reservations whose process was never registered (their node died
// between the two) to register it.
type Router struct {
	cfg RouterConfig

	forget atomic.Int64 // Forget, in nanoseconds

	mu    sync.Mutex
	moved chan struct{} // closed and replaced whenever pos moves
	pos   uint64        // stream sequence the index has folded through
	subs  map[string][]*Subscription
	open  map[string]*Delivery // reserved, not marked started
}

// NewRouter returns a router; Run keeps its index.
func NewRouter(cfg RouterConfig) *Router {
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = 5 * time.Second
	}
	if cfg.SweepAfter <= 0 {
		cfg.SweepAfter = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Router{cfg: cfg, moved: make(chan struct{}), subs: map[string][]*Subscription{}, open: map[string]*Delivery{}}
	r.SetForget(cfg.Forget)
	return r
}

// DefaultForget is how long a router keeps a deleted subscription's
// history by default: the default retention of ended work.
const DefaultForget = 7 * 24 * time.Hour

// SetForget sets how long after its deletion a subscription's history
// stays in the index (the deployment's retention); 0 is DefaultForget.
func (r *Router) SetForget(d time.Duration) {
	if d <= 0 {
		d = DefaultForget
	}
	r.forget.Store(int64(d))
}

// Run keeps the router's index and sweeps until ctx ends.
func (r *Router) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- r.follow(ctx) }()
	t := time.NewTicker(r.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			<-errc
			return nil
		case err := <-errc:
			return err
		case <-t.C:
			r.Sweep(ctx)
		}
	}
}

// follow tails subscriptions and deliveries, starting over after an error.
func (r *Router) follow(ctx context.Context) error {
	subj := r.cfg.Store.Subjects()
	filters := []string{subj.AllTriggers("sub"), subj.AllTriggers("dlv")}
	for ctx.Err() == nil {
		r.mu.Lock()
		from := r.pos + 1
		r.mu.Unlock()
		err := r.cfg.Store.Tail(ctx, streams.Triggers, filters, from, func(m *streams.Msg, _ uint64) error {
			r.fold(m)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("following subscriptions; starting over", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

func (r *Router) fold(m *streams.Msg) {
	r.mu.Lock()
	if m.Seq <= r.pos {
		r.mu.Unlock() // folded already (a second Run)
		return
	}
	defer func() {
		r.pos = m.Seq
		close(r.moved)
		r.moved = make(chan struct{})
		r.mu.Unlock()
	}()
	id, err := idOf(m.Subject)
	if err != nil {
		return
	}
	if err := r.cfg.Store.Verify(m); err != nil {
		r.cfg.Logger.Error("trigger record set aside", "subject", m.Subject, "seq", m.Seq, "err", err)
		return
	}
	if strings.Contains(m.Subject, ".trig.sub.") {
		s, err := decodeSubscription(m)
		if err != nil {
			r.cfg.Logger.Warn("unreadable subscription state passed over", "subject", m.Subject, "seq", m.Seq, "err", err)
			return
		}
		r.subs[s.ID] = append(r.subs[s.ID], s)
		return
	}
	if _, ok := r.open[id]; ok {
		delete(r.open, id) // its started mark
		return
	}
	var probe struct {
		Started bool   `json:"started"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(m.Data, &probe) == nil && (probe.Started || probe.Error != "") {
		return // a mark whose reservation was read before this node's cursor
	}
	var d *Delivery
	if err := foldDelivery(&d, m); err != nil {
		r.cfg.Logger.Warn("unreadable delivery passed over", "subject", m.Subject, "seq", m.Seq, "err", err)
		return
	}
	r.open[id] = d
}

// asOf returns every subscription as it stood just before stream
// sequence seq.
func (r *Router) asOf(seq uint64) []*Subscription {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Subscription
	for _, states := range r.subs {
		var at *Subscription
		for _, s := range states {
			if s.Seq >= seq {
				break
			}
			at = s
		}
		if at != nil {
			out = append(out, at)
		}
	}
	return out
}

// catchUp waits until the index holds every subscription state stored
// before stream sequence seq.
func (r *Router) catchUp(ctx context.Context, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	filter := r.cfg.Store.Subjects().AllTriggers("sub")
	for {
		r.mu.Lock()
		pos, moved := r.pos, r.moved
		r.mu.Unlock()
		next, err := r.cfg.Store.NextOnSubject(ctx, filter, pos+1)
		if errors.Is(err, streams.ErrNotFound) || err == nil && next.Seq >= seq {
			return nil
		}
		if err != nil {
			return err
		}
		for pos < next.Seq {
			select {
			case <-ctx.Done():
				return fmt.Errorf("triggers: subscriptions not read through %d: %w", next.Seq, ctx.Err())
			case <-moved:
			}
			r.mu.Lock()
			pos, moved = r.pos, r.moved
			r.mu.Unlock()
		}
	}
}

// Deliver records the occurrence of a signal (m, a message of the
// TRIGGERS stream on <prefix>.signal.<type>.<key...>) and starts the
// process of each of its deliveries. The occurrence is named by the
// signal's source and its Nats-Msg-Id (or, without one, its stream
// sequence), so delivering the same signal again, or the same signal
// published again, records nothing new and only finishes starting what
// the first delivery reserved.
func (r *Router) Deliver(ctx context.Context, m *streams.Msg) (*Occurrence, []*Delivery, error) {
	rest, ok := r.cfg.Store.Subjects().SignalRest(m.Subject)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s is not a signal subject", ErrInvalid, clip(m.Subject))
	}
	typ, key, err := Source(rest)
	if err != nil {
		return nil, nil, err
	}
	if len(m.Data) > MaxSignalBytes || !json.Valid(m.Data) {
		return nil, nil, fmt.Errorf("%w: a signal's payload must be JSON of at most %d bytes", ErrInvalid, MaxSignalBytes)
	}
	idem := m.MsgID()
	if idem == "" {
		idem = fmt.Sprintf("seq:%d", m.Seq)
	}
	if err := r.catchUp(ctx, m.Seq); err != nil {
		return nil, nil, err
	}
	occ := Occurrence{ID: OccurrenceID(typ, key, idem), SourceType: typ, SourceKey: key, IdempotencyKey: idem,
		Subject: m.Subject, Payload: json.RawMessage(m.Data), Signal: m.Seq}
	o, ds, _, err := r.cfg.Triggers.Record(ctx, occ, r.asOf(m.Seq))
	if err != nil {
		return nil, nil, err
	}
	if r.cfg.AfterReserve != nil {
		r.cfg.AfterReserve(o)
	}
	// One delivery that cannot start (its input over a process's bound,
	// say) keeps none of the others waiting for the sweep.
	var first error
	for _, d := range ds {
		if err := r.cfg.Triggers.Start(ctx, r.cfg.Registry, d); err != nil && first == nil {
			first = err
		}
	}
	return o, ds, first
}

// Sweep registers the process of every reservation older than SweepAfter
// whose process was never registered, and returns how many it started,
// and forgets the subscriptions deleted longer than Forget ago.
// Each is read again first: the reader may be behind a start mark, and a
// prune may have taken the delivery and its ended process since, which a
// registration would bring back to run again.
func (r *Router) Sweep(ctx context.Context) int {
	now := r.cfg.Triggers.now()
	cutoff := now.Add(-r.cfg.SweepAfter)
	forgotten := now.Add(-time.Duration(r.forget.Load()))
	r.mu.Lock()
	for id, states := range r.subs {
		// A signal stored before the deletion may still come, matched as
		// of its sequence; past the retention a sweep prunes the history
		// from the stream too.
		if last := states[len(states)-1]; last.Deleted && last.At.Before(forgotten) {
			delete(r.subs, id)
		}
	}
	var due []*Delivery
	for _, d := range r.open {
		if d.At.Before(cutoff) {
			due = append(due, d)
		}
	}
	r.mu.Unlock()
	n := 0
	for _, d := range due {
		cur, err := r.cfg.Triggers.Delivery(ctx, d.ID)
		if errors.Is(err, ErrNotFound) || err == nil && (cur.Started || cur.Failed != "") {
			// Pruned, or started: the reader passes over the mark it has
			// not read when it finds no reservation for it.
			r.mu.Lock()
			if r.open[d.ID] == d {
				delete(r.open, d.ID)
			}
			r.mu.Unlock()
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("sweep: reading a reserved delivery", "delivery", d.ID, "err", err)
			}
			continue
		}
		if err := r.cfg.Triggers.Start(ctx, r.cfg.Registry, cur); err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("sweep: starting a reserved delivery", "delivery", d.ID, "err", err)
			}
			continue
		}
		n++
		r.cfg.Logger.Info("sweep started a reserved delivery", "delivery", d.ID, "occurrence", d.Occurrence, "subscription", d.Subscription)
	}
	return n
}

// Open returns the ids of the reservations the router knows whose
// process was not marked started.
func (r *Router) Open() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.open))
	for id := range r.open {
		out = append(out, id)
	}
	return out
}
