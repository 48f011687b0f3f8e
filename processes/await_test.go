package processes

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

// pruneBeforeTail ends the process and prunes everything ended between
// Await's read of the log and its tail: a race a real server gives only by
// chance.
type pruneBeforeTail struct {
	*streams.Client
	r  *Registry
	id string
}

func (s pruneBeforeTail) Tail(ctx context.Context, st streams.Stream, filters []string, from uint64, fn func(*streams.Msg, uint64) error) error {
	if _, _, err := s.r.Finish(ctx, s.id, TypeFailed, Failure{Code: "x"}, ByExternalOwner); err != nil {
		return err
	}
	if _, err := s.r.Prune(ctx, time.Now().Add(time.Hour)); err != nil {
		return err
	}
	return s.Client.Tail(ctx, st, filters, from, fn)
}

// An await that starts on a running process, ended and pruned before the
// await follows its log, ends as unknown instead of waiting for ever.
func TestAwaitOfPrunedProcess(t *testing.T) {
	ctx, c := openStreams(t)
	r := New(c, "node")
	reg := externalJob
	// An earlier process of the same id, pruned: its mark must not end
	// the await of the next one.
	for range 2 {
		if _, _, err := r.Register(ctx, "job", reg); err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.Finish(ctx, "job", TypeCompleted, "done", ByExternalOwner); err != nil {
			t.Fatal(err)
		}
		if p, err := r.Await(ctx, "job"); err != nil || p.Status() != Completed {
			t.Fatalf("await of an ended process: %+v, %v", p, err)
		}
		if _, err := r.Prune(ctx, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := r.Register(ctx, "job", reg); err != nil {
		t.Fatal(err)
	}
	racy := New(pruneBeforeTail{Client: c, r: r, id: "job"}, "watcher")
	if _, err := racy.Await(ctx, "job"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("await of a process pruned under it: %v, want ErrUnknown", err)
	}
}

// countReads counts the reads of a process's log, and the appends.
type countReads struct {
	*streams.Client
	mu                    sync.Mutex
	reads, tails, appends int
}

func (s *countReads) Append(ctx context.Context, p streams.Publication, expect uint64) (uint64, bool, error) {
	s.mu.Lock()
	s.appends++
	s.mu.Unlock()
	return s.Client.Append(ctx, p, expect)
}

func (s *countReads) Read(ctx context.Context, filter string, from uint64, fn func(*streams.Msg) error) error {
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	return s.Client.Read(ctx, filter, from, fn)
}

func (s *countReads) Tail(ctx context.Context, st streams.Stream, filters []string, from uint64, fn func(*streams.Msg, uint64) error) error {
	s.mu.Lock()
	s.tails++
	s.mu.Unlock()
	return s.Client.Tail(ctx, st, filters, from, fn)
}

// A registration that creates its process does not read the log back, a
// second registration of it does, and the await of an ended process is one
// read and no consumer (ADR 0037).
func TestRoundTripsOfRegisterAndAwait(t *testing.T) {
	ctx, c := openStreams(t)
	s := &countReads{Client: c}
	r := New(s, "node")
	reg := externalJob
	p, created, err := r.Register(ctx, "job", reg)
	if err != nil || !created || p.Status() != Pending || p.Head == 0 {
		t.Fatalf("register: %+v, created %v, %v", p, created, err)
	}
	if s.reads != 0 {
		t.Fatalf("a registration that created its process read the log %d times", s.reads)
	}
	again, created, err := r.Register(ctx, "job", reg)
	if err != nil || created || again.Head != p.Head || s.reads != 1 {
		t.Fatalf("registering again: %+v, created %v, %v, %d reads; want the stored process, one read", again, created, err, s.reads)
	}
	if _, _, err := r.Finish(ctx, "job", TypeCompleted, "done", ByExternalOwner); err != nil {
		t.Fatal(err)
	}
	s.reads = 0
	if p, err := r.Await(ctx, "job"); err != nil || p.Status() != Completed {
		t.Fatalf("await: %+v, %v", p, err)
	}
	if s.reads != 1 || s.tails != 0 {
		t.Fatalf("the await of an ended process made %d reads and %d consumers; want one read", s.reads, s.tails)
	}
}

type echo struct{}

func (echo) Execute(_ context.Context, run *Run) (json.RawMessage, error) {
	return run.Registration().Input.Args, nil
}

// Beside a running worker a call is two writes and no read: the
// registration carries its first attempt, the outcome is the second, and
// the awaiter is told the end by the worker (ADR 0037).
func TestRoundTripsBesideAWorker(t *testing.T) {
	ctx, c := openStreams(t)
	s := &countReads{Client: c}
	r := New(s, "node")
	m := leases.New(c, leases.LocalOwner("node"))
	if err := m.Beat(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	w := NewWorker(WorkerConfig{Registry: r, Leases: m, Store: c, Executor: echo{}})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	testenv.WaitFor(t, 10*time.Second, func() error {
		if r.worker.Load() == nil {
			return errors.New("the worker does not run yet")
		}
		probe := w.reserve("probe", Registration{})
		if probe == nil {
			return errors.New("the worker takes no work yet")
		}
		probe.drop()
		return nil
	})
	reg := Registration{Input: Input{Kind: ToolCall, Tool: "echo", Args: json.RawMessage(`{"n":1}`)}, Disposition: OwnerBound, Provenance: Provenance{Host: "h"}}
	p, created, err := r.Register(ctx, "call", reg)
	if err != nil || !created || !p.InAttempt() || p.LastStart.Owner.Node != "node" {
		t.Fatalf("register: %+v, created %v, %v; want it created with attempt 1 begun here", p, created, err)
	}
	ended, err := r.Await(ctx, "call")
	if err != nil || ended.Status() != Completed || string(ended.End.Data) != `{"n":1}` || ended.Attempts() != 1 {
		t.Fatalf("await: %+v, %v", ended, err)
	}
	s.mu.Lock()
	appends, reads, tails := s.appends, s.reads, s.tails
	s.mu.Unlock()
	if appends != 2 || reads != 0 || tails != 0 {
		t.Fatalf("%d appends, %d reads, %d consumers; want 2 appends and nothing read", appends, reads, tails)
	}
	evs, err := r.Events(ctx, "call", 0)
	if err != nil || len(evs) != 2 || evs[0].Start == nil || evs[1].Type != TypeCompleted {
		t.Fatalf("events %+v, %v; want the registration with its start, then the end", evs, err)
	}
}

// openStreams opens a deployment's streams on a server of the test's own.
func openStreams(t *testing.T) (context.Context, *streams.Client) {
	t.Helper()
	srv := testenv.RunJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c
}

// externalJob is work owned outside lash: nothing runs it.
var externalJob = Registration{Input: Input{Kind: External, ExternalRef: "job"}, Disposition: ExternallyOwned, Provenance: Provenance{Host: "h"}}
