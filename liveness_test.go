package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
)

// cutLiveness is a lease store whose writes and reads of node liveness
// keys fail while cut is set: a node cut off from its liveness key, which
// the embedded server cannot do on demand to one key.
type cutLiveness struct {
	leases.Store
	cut atomic.Bool
}

var errCut = errors.New("test: liveness cut off")

func (s *cutLiveness) node(key string) bool { return s.cut.Load() && strings.HasPrefix(key, "node.") }

func (s *cutLiveness) KVGet(ctx context.Context, key string) (*streams.KVEntry, error) {
	if s.node(key) {
		return nil, errCut
	}
	return s.Store.KVGet(ctx, key)
}

func (s *cutLiveness) KVCreate(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	if s.node(key) {
		return 0, errCut
	}
	return s.Store.KVCreate(ctx, key, value, ttl)
}

func (s *cutLiveness) KVSwap(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	if s.node(key) {
		return 0, errCut
	}
	return s.Store.KVSwap(ctx, key, value, rev, ttl)
}

// holdCalls is a tool whose calls run until their context ends; each
// call's end (its context's cause) goes to ended.
type holdCalls struct {
	mu      sync.Mutex
	started chan int
	ended   chan error
	calls   int
}

func (h *holdCalls) register(t *testing.T, reg *tools.Registry) {
	t.Helper()
	tool, err := tools.Func("hold", "holds until stopped", func(ctx context.Context, _ struct{}) (string, error) {
		h.mu.Lock()
		h.calls++
		n := h.calls
		h.mu.Unlock()
		h.started <- n
		<-ctx.Done()
		h.ended <- context.Cause(ctx)
		return "", ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
}

// livenessNode runs processes on a node with a two-second lease TTL whose
// liveness the test can cut off, and a "hold" tool.
func livenessNode(t *testing.T, r *rig) (*Node, *cutLiveness, *holdCalls) {
	t.Helper()
	reg, hold := tools.New(), &holdCalls{started: make(chan int, 8), ended: make(chan error, 8)}
	hold.register(t, reg)
	store := &cutLiveness{}
	n := r.node("a", WithTools(reg), WithLeaseTTL(2*time.Second), WithToolTimeout(time.Hour),
		withLeaseStore(func(s leases.Store) leases.Store { store.Store = s; return store }))
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() { n.RunProcesses(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return n, store, hold
}

func startHold(t *testing.T, r *rig, n *Node, id string) {
	t.Helper()
	_, _, err := n.Processes().Register(r.ctx, id, processes.Registration{
		Input:       processes.Input{Kind: processes.ToolCall, Tool: "hold", Args: json.RawMessage(`{}`)},
		Disposition: processes.Rerunnable, Provenance: processes.Provenance{Host: "test"}})
	if err != nil {
		t.Fatal(err)
	}
}

func within[T any](t *testing.T, c <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %s", what, d)
	}
	var zero T
	return zero
}

// A node cut off from its liveness key stops its background attempts by
// its own clock, before the key can expire at the server and another node
// take the work, and hands them back; it begins none while no beat lands,
// and runs the work again once one does.
func TestLivenessLapseStopsAttempts(t *testing.T) {
	r := newRig(t)
	n, store, hold := livenessNode(t, r)
	startHold(t, r, n, "job")
	within(t, hold.started, 10*time.Second, "the first call")
	store.cut.Store(true)
	if cause := within(t, hold.ended, 10*time.Second, "the call's end once the liveness is cut"); !strings.Contains(fmt.Sprint(cause), "liveness lapsed") {
		t.Fatalf("the call ended for %v; want the lapse", cause)
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		p, err := n.Processes().Get(r.ctx, "job")
		if err != nil {
			return err
		}
		if !p.Released || p.LastStart.Attempt != 1 {
			return fmt.Errorf("attempt %d, released %v; want attempt 1 handed back", p.LastStart.Attempt, p.Released)
		}
		return nil
	})
	if !store.cut.Load() {
		t.Fatal("the cut ended early")
	}
	select {
	case k := <-hold.started:
		t.Fatalf("call %d began while the node's liveness was cut", k)
	default:
	}
	store.cut.Store(false)
	if k := within(t, hold.started, 20*time.Second, "the call again once a beat lands"); k != 2 {
		t.Fatalf("call %d after the lapse; want the second", k)
	}
}

// A beat that lands and finds the node's liveness key gone (it expired
// while the node was paused, say: every other node took the node for dead
// meanwhile) stops the attempts the node ran; the node goes on, alive
// again, and runs the work again.
func TestLivenessGoneStopsAttempts(t *testing.T) {
	r := newRig(t)
	n, _, hold := livenessNode(t, r)
	startHold(t, r, n, "job")
	within(t, hold.started, 10*time.Second, "the first call")
	key, err := leases.Key("node", "a")
	if err != nil {
		t.Fatal(err)
	}
	// The node's beats write the key too: delete it at its head.
	testenv.WaitFor(t, 10*time.Second, func() error {
		e, err := n.Streams().KVGet(r.ctx, key)
		if err != nil {
			return err
		}
		_, err = n.Streams().KVDelete(r.ctx, key, e.Revision)
		return err
	})
	if cause := within(t, hold.ended, 10*time.Second, "the call's end once the key is gone"); !strings.Contains(fmt.Sprint(cause), "liveness lapsed") {
		t.Fatalf("the call ended for %v; want the lapse", cause)
	}
	if k := within(t, hold.started, 20*time.Second, "the call again"); k != 2 {
		t.Fatalf("call %d after the lapse; want the second", k)
	}
}

const holdSessionScript = `
rule hold
  when user contains hold
  when tools = 0
  call hold {}

default
  say done
`

// A node cut off from its liveness key stops its session runs by its own
// clock, before the key can expire at the server, though their session
// leases are renewed all along: a claimant takes the lease of a node it
// finds dead at once, so the run must not outlive the node's trust in its
// key. Before, the run went on until a renewal found its lease taken (the
// seeded store faults showed two runs of a session at once). Once a beat
// lands again, the node runs sessions again.
func TestLivenessLapseStopsSessionRuns(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(holdSessionScript))
	reg, hold := tools.New(), &holdCalls{started: make(chan int, 8), ended: make(chan error, 8)}
	hold.register(t, reg)
	store := &cutLiveness{}
	// The tool timeout ends the call should the run go on: a failure, not a hang.
	n := r.node("a", WithTools(reg), WithLeaseTTL(2*time.Second), WithToolTimeout(15*time.Second),
		withLeaseStore(func(s leases.Store) leases.Store { store.Store = s; return store }))
	if _, _, err := n.Session("s1").Send(r.ctx, "k1", Input{Text: "hold on"}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { _, err := n.Session("s1").Run(r.ctx); ran <- err }()
	within(t, hold.started, 10*time.Second, "the call")
	store.cut.Store(true)
	cause := within(t, hold.ended, 10*time.Second, "the call's end once the liveness is cut")
	key, err := leases.Key("node", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Streams().KVGet(r.ctx, key); err != nil {
		t.Fatalf("the node's liveness key when its run stopped: %v; want it still there", err)
	}
	if !errors.Is(cause, leases.ErrLost) || !strings.Contains(cause.Error(), "liveness lapsed") {
		t.Fatalf("the call ended for %v; want the lapse", cause)
	}
	if err := within(t, ran, 10*time.Second, "the run's end"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the run: %v; want the lease lost", err)
	}
	store.cut.Store(false)
	if _, _, err := n.Session("s2").Send(r.ctx, "k1", Input{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		res, err := n.Session("s2").Run(r.ctx)
		if err == nil && len(res) != 1 {
			return fmt.Errorf("%d turns", len(res))
		}
		return err
	})
}
