package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/leases"
	"github.com/nats-io/nats.go/jetstream"
)

// Sessions seeds sessions that ran and ended (a lease claimed and
// released each, as every run leaves) up to each count in turn, and times
// listing the live leases, as the node API's info and lash-admin leases ls
// do, and a turn on a new session. Ratios are against the first count.
func Sessions(ctx context.Context, e *Env, counts []int, n int) ([]Result, error) {
	node, nc, err := e.node("sessions", loopScript(0))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	m := leases.New(node.Streams(), leases.LocalOwner("seeder"))
	observer := leases.New(node.Streams(), leases.LocalOwner("observer"))
	seeded := 0
	var out []Result
	var baseList, baseTurn time.Duration
	for _, count := range counts {
		if err := seed(ctx, m, seeded, count); err != nil {
			return nil, err
		}
		seeded = count
		// Sessions that ran and ended: their markers' TTL has passed.
		released := time.Now()
		if err := e.settled(ctx, node.Streams().LeaseBucket()); err != nil {
			return nil, err
		}
		drained := time.Since(released)
		// A few untimed first: the first count's figures are the floor, and
		// a cold first sample (a heap still growing, caches empty) would
		// flatter every later count.
		var lists, turns []time.Duration
		for i := range n + 3 {
			start := time.Now()
			if _, err := observer.List(ctx, "sess."); err != nil {
				return nil, err
			}
			list := time.Since(start)
			s := node.Session(fmt.Sprintf("new-%d-%d", count, i))
			if _, _, err := s.Send(ctx, "k", lash.Input{Text: "hi"}); err != nil {
				return nil, err
			}
			start = time.Now()
			if _, err := s.Run(ctx); err != nil {
				return nil, err
			}
			if i >= 3 {
				lists, turns = append(lists, list), append(turns, time.Since(start))
			}
		}
		list, turn := median(lists), median(turns)
		if baseList == 0 {
			baseList, baseTurn = list, turn
		}
		out = append(out,
			Result{Name: fmt.Sprintf("leases ls at %d sessions run (%s)", count, e.Mode()), Value: ms(list), Unit: "ms",
				Floor: ms(baseList), Ratio: float64(list) / float64(baseList),
				Note: fmt.Sprintf("floor: at %d; the released leases' markers were gone %.1f s after the last release", counts[0], drained.Seconds())},
			Result{Name: fmt.Sprintf("new session's turn at %d sessions run (%s)", count, e.Mode()), Value: ms(turn), Unit: "ms",
				Floor: ms(baseTurn), Ratio: float64(turn) / float64(baseTurn), Note: fmt.Sprintf("floor: at %d", counts[0])})
	}
	return out, nil
}

// settled waits until the lease bucket holds no session key. The server
// removes released leases' markers as their TTL runs out, one by one: with
// fsync, after a burst of releases as large as a seed, that takes minutes,
// so it waits as long as their number keeps falling, and gives up after a
// minute without progress.
func (e *Env) settled(ctx context.Context, bucket string) error {
	st, err := e.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return err
	}
	last, progress := uint64(0), time.Now()
	for {
		// The number of subjects first (no list of them): while it is
		// large, only whether it falls matters.
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		left := info.State.NumSubjects
		if left < 1000 {
			info, err := st.Info(ctx, jetstream.WithSubjectFilter("$KV."+bucket+".sess.>"))
			if err != nil {
				return err
			}
			if len(info.State.Subjects) == 0 {
				return nil
			}
		}
		if last == 0 || left < last {
			last, progress = left, time.Now()
		}
		if time.Since(progress) > time.Minute {
			return fmt.Errorf("sessions: %d keys left in the lease bucket, none removed for a minute", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// seed claims and releases the leases of sessions from..to-1, 16 at once.
func seed(ctx context.Context, m *leases.Manager, from, to int) error {
	return sixteen(from, to, func(i int) error {
		key, err := leases.Key("sess", fmt.Sprintf("seeded-%d", i))
		if err != nil {
			return err
		}
		l, err := m.Claim(ctx, key, 5*time.Second)
		if err == nil {
			err = m.Release(ctx, l)
		}
		return err
	})
}

// sixteen runs fn for from..to-1, 16 at once, until one fails.
func sixteen(from, to int, fn func(i int) error) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(to) {
					return
				}
				if err := fn(int(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Failover kills the node running a turn (its connection closes mid-call,
// its lease stays) and times until another serving node commits the turn:
// with proof of death (the dead node's liveness key gone, as when its PID
// is gone on the same host) against the dispatch ack wait, and without
// proof against the lease TTL.
func Failover(ctx context.Context, e *Env, proof bool) (Result, error) {
	const ttl = 5 * time.Second
	claimed := make(chan struct{}, 1)
	victim, vnc, err := e.node("victim", "default\n  delay 1h\n  say late\n", lash.WithLeaseTTL(ttl), lash.WithObserver(func(ev lash.Event) {
		if ev.Kind == lash.EventEffectExecuted {
			select {
			case claimed <- struct{}{}:
			default:
			}
		}
	}))
	if err != nil {
		return Result{}, err
	}
	defer victim.Close(context.Background())
	committed := make(chan time.Time, 1)
	survivor, snc, err := e.node("survivor", loopScript(0), lash.WithLeaseTTL(ttl), lash.WithObserver(func(ev lash.Event) {
		if ev.Kind == lash.EventTurnCommitted {
			select {
			case committed <- time.Now():
			default:
			}
		}
	}))
	if err != nil {
		return Result{}, err
	}
	defer snc.Close()
	defer survivor.Close(context.Background())
	// The victim serves alone until its turn recorded the sync of tools
	// and waits in the model call; then the survivor serves too.
	vctx, vstop := context.WithCancel(ctx)
	defer vstop()
	go func() { _ = victim.Serve(vctx) }()
	s := victim.Session(fmt.Sprintf("failover-%v", proof))
	if _, _, err := s.Send(ctx, "k", lash.Input{Text: "hi"}); err != nil {
		return Result{}, err
	}
	select {
	case <-claimed:
	case <-time.After(30 * time.Second):
		return Result{}, errors.New("failover: the victim never claimed the session")
	}
	sctx, sstop := context.WithCancel(ctx)
	defer sstop()
	go func() { _ = survivor.Serve(sctx) }()
	killed := time.Now()
	vnc.Close()
	if proof {
		key, err := leases.Key("node", "victim")
		if err != nil {
			return Result{}, err
		}
		kv, err := e.js.KeyValue(ctx, survivor.Streams().LeaseBucket())
		if err != nil {
			return Result{}, err
		}
		if err := kv.Purge(ctx, key); err != nil {
			return Result{}, err
		}
	}
	var at time.Time
	select {
	case at = <-committed:
	case <-time.After(4 * ttl):
		return Result{}, errors.New("failover: the survivor never committed the turn")
	}
	took := at.Sub(killed)
	if proof {
		return Result{Name: "resume after a kill, proof of death (" + e.Mode() + ")", Value: ms(took), Unit: "ms",
			Floor: ms(time.Second), Ratio: float64(took) / float64(time.Second), Note: "floor: 1 s"}, nil
	}
	return Result{Name: "resume after a kill, no proof (" + e.Mode() + ")", Value: ms(took), Unit: "ms",
		Floor: ms(ttl), Ratio: float64(took) / float64(ttl), Note: "floor: the lease TTL"}, nil
}
