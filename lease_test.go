package lash

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
)

// slowRenewals is the lease store of a node whose session lease renewals
// are answered late or never: faults the embedded server cannot make on
// demand. Everything else goes to the server.
type slowRenewals struct {
	*streams.Client
	// hang: a renewal gets no answer until its context ends.
	hang atomic.Bool
	// late: a renewal lands, and its answer comes lateBy later (or as its
	// context ends); landed is closed on the first.
	late   atomic.Bool
	lateBy time.Duration
	landed chan struct{}
	once   sync.Once
}

func (s *slowRenewals) KVSwap(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	if !strings.HasPrefix(key, "sess.") {
		return s.Client.KVSwap(ctx, key, value, rev, ttl)
	}
	if s.hang.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	r, err := s.Client.KVSwap(ctx, key, value, rev, ttl)
	if err != nil || !s.late.Load() {
		return r, err
	}
	s.once.Do(func() { close(s.landed) })
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(s.lateBy):
		return r, nil
	}
}

// slowLeaseNode is a node whose session leases go through slowRenewals.
// Its own liveness beat is replaced by the test's, which swaps its lease
// manager and must not race the beat loop; the test's beats tell the node
// how long it may trust its key, as its own would.
func slowLeaseNode(t *testing.T, r *rig, ttl time.Duration, reg *tools.Registry) (*Node, *slowRenewals) {
	t.Helper()
	n := r.node("a", WithTools(reg), WithLeaseTTL(ttl), func(o *options) { o.heartbeat = time.Hour })
	beats := leases.New(n.Streams(), n.owner)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			start := time.Now()
			if beats.Beat(ctx, ttl) == nil {
				n.alive.trust(beats.TrustedUntil(start, ttl))
			}
			select {
			case <-ctx.Done():
			case <-time.After(ttl / 4):
			}
		}
	}()
	store := &slowRenewals{Client: n.client, landed: make(chan struct{})}
	n.leases = leases.New(store, n.owner)
	return n, store
}

// A run whose renewals go unanswered stops at its lease's expiry, by its
// own clock: its tool call ends before another owner can take the lease
// (the server's TTL runs out after that expiry), not when the renewal's
// request times out, seconds later.
func TestRunStopsAtLeaseExpiry(t *testing.T) {
	r := newRig(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var ended atomic.Int64
	n, store := slowLeaseNode(t, r, time.Second, blockingTools(t, started, release, &ended))
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { _, err := s.Run(r.ctx); ran <- err }()
	<-started
	store.hang.Store(true)
	key, err := leases.Key("sess", "s1")
	if err != nil {
		t.Fatal(err)
	}
	probe := leases.New(n.Streams(), leases.LocalOwner("probe"))
	var taken time.Time
	for taken.IsZero() {
		if _, err := probe.Claim(r.ctx, key, time.Second); err == nil {
			taken = time.Now()
		} else if !errors.Is(err, leases.ErrBusy) {
			t.Fatal(err)
		} else {
			time.Sleep(20 * time.Millisecond) // polling the server's expiry
		}
	}
	if err := <-ran; !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("run: %v; want the lease lost", err)
	}
	if e := ended.Load(); e == 0 || !time.Unix(0, e).Before(taken) {
		t.Fatalf("the tool call ran on until %v, after another owner took the lease at %v", time.Unix(0, e), taken)
	}
}

// A renewal in flight when a run ends is waited for: it landed, so the
// lease's revision moved, and the release must use the new one. Cut
// short, it left the session held for a TTL after the run returned.
func TestReleaseAfterLateRenewal(t *testing.T) {
	r := newRig(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var ended atomic.Int64
	n, store := slowLeaseNode(t, r, 3*time.Second, blockingTools(t, started, release, &ended))
	store.lateBy = 500 * time.Millisecond
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { _, err := s.Run(r.ctx); ran <- err }()
	<-started
	store.late.Store(true)
	<-store.landed
	close(release) // the run ends while the renewal's answer is on its way
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	key, err := leases.Key("sess", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.New(n.Streams(), leases.LocalOwner("probe")).Claim(r.ctx, key, time.Second); err != nil {
		t.Fatalf("the session after its run returned: %v; want it free", err)
	}
}

// A run whose lease is taken over (its node's liveness key gone: proof of
// death) while its three parallel calls are about to record finds each
// call recorded by the new holder: the calls' goroutines look up and note
// that writer at once, under the race detector too. The new holder
// commits the turn; the old run ends without committing.
func TestTakeoverDuringParallelCalls(t *testing.T) {
	r := newRig(t)
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := r.node("a", WithLeaseTTL(time.Minute), withBoundary(func(name string) error {
		if strings.HasPrefix(name, "before-record tool ") {
			once.Do(func() { close(reached) })
			<-release
		}
		return nil
	}))
	b := r.node("b")
	if _, _, err := a.Session("s1").Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { _, err := a.Session("s1").Run(r.ctx); ran <- err }()
	<-reached
	key, err := leases.Key("node", "a")
	if err != nil {
		t.Fatal(err)
	}
	e, err := a.Streams().KVGet(r.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Streams().KVDelete(r.ctx, key, e.Revision); err != nil {
		t.Fatal(err)
	}
	res, err := b.Session("s1").Run(r.ctx)
	close(release)
	if err != nil || len(res) != 1 {
		t.Fatalf("the new holder's run: %+v, %v; want the turn", res, err)
	}
	if err := <-ran; err == nil {
		t.Fatal("the old run ended without an error: it committed, or thinks it did")
	}
}

// sessionSwaps counts the compare-and-sets a node's lease manager makes
// on session leases: a claim over the marker of its own release is one.
type sessionSwaps struct {
	*streams.Client
	n atomic.Int64
}

func (s *sessionSwaps) KVSwap(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	if strings.HasPrefix(key, "sess.") {
		s.n.Add(1)
	}
	return s.Client.KVSwap(ctx, key, value, rev, ttl)
}

// A node forgets a deleted session at its deletion mark: its kept state
// and the marker of its last lease release both go, so a burst of deleted
// sessions leaves nothing of them in the node's memory; the session's next
// run claims its lease anew, not over a marker the deletion replaced.
func TestDeletionForgetsSession(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	store := &sessionSwaps{Client: n.client}
	n.leases = leases.New(store, n.owner)
	s := n.Session("s1")
	for i, key := range []string{"k1", "k2"} {
		if _, _, err := s.Send(r.ctx, key, Input{Text: "Weather?"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(r.ctx); err != nil {
			t.Fatal(err)
		}
		if got := store.n.Load(); got != int64(i) {
			t.Fatalf("after run %d the node swapped session leases %d times; want %d (the second claims over its own marker)", i+1, got, i)
		}
	}
	kept(t, n, "s1")
	deleteSession(t, n.Streams(), "s1")
	testenv.WaitFor(t, 10*time.Second, func() error {
		n.states.mu.Lock()
		defer n.states.mu.Unlock()
		if _, ok := n.states.by["s1"]; ok {
			return errors.New("the node still keeps the deleted session's state")
		}
		return nil
	})
	if _, _, err := s.Send(r.ctx, "k3", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	if got := store.n.Load(); got != 1 {
		t.Fatalf("the run after the deletion swapped session leases %d more times; want none: a claim over the forgotten marker", got-1)
	}
}
