package processes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/testenv"
)

// A worker whose reader is behind forgets the processes pruned before it
// read their ends: it began them beside its registry, so it holds their
// folds, and a purge leaves no end to read, only the prune mark.
// heldWorker runs a worker whose reader, at the first end it meets,
// holds until release is called (as a full queue of wakes does in a
// burst): held closes then. It returns once the worker takes work.
func heldWorker(t *testing.T, concurrency int) (ctx context.Context, r *Registry, w *Worker, held chan struct{}, release func()) {
	t.Helper()
	ctx, c := openStreams(t)
	r = New(c, "node")
	m := leases.New(c, leases.LocalOwner("node"))
	if err := m.Beat(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	held = make(chan struct{})
	released := make(chan struct{})
	var once, releaseOnce sync.Once
	release = func() { releaseOnce.Do(func() { close(released) }) }
	w = NewWorker(WorkerConfig{Registry: r, Leases: m, Store: c, Executor: echo{}, Concurrency: concurrency, OnEnd: func(*Process, bool) {
		once.Do(func() { close(held); <-released })
	}})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })
	t.Cleanup(release) // before the stop: cleanups run last first
	testenv.WaitFor(t, 10*time.Second, func() error {
		probe := w.reserve("probe", Registration{})
		if probe == nil {
			return errors.New("the worker takes no work yet")
		}
		probe.drop()
		return nil
	})
	return ctx, r, w, held, release
}

func TestWorkerForgetsProcessesPrunedAheadOfItsReader(t *testing.T) {
	ctx, r, w, held, release := heldWorker(t, 64)
	call := func(id string) error {
		reg := Registration{Input: Input{Kind: ToolCall, Tool: "echo", Args: json.RawMessage(`{}`)}, Disposition: OwnerBound, Provenance: Provenance{Host: "h"}}
		if p, created, err := r.Register(ctx, id, reg); err != nil || !created || !p.InAttempt() {
			return fmt.Errorf("register %s: %+v, created %v, %v; want it begun here", id, p, created, err)
		}
		if p, err := r.Await(ctx, id); err != nil || p.Status() != Completed {
			return fmt.Errorf("await %s: %+v, %v", id, p, err)
		}
		return nil
	}
	if err := call("first"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the reader never reported the first end")
	}
	// More messages than the reader's consumer takes ahead (500): those
	// past it are still on the server when the prune comes.
	const behind = 400
	errs := make(chan error, behind)
	ids := make(chan string)
	var wg sync.WaitGroup
	// Fewer callers than slots: a call is told its end before its slot
	// is given back, and each must find one free to begin here.
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				errs <- call(id)
			}
		})
	}
	for i := range behind {
		ids <- fmt.Sprintf("p%d", i)
	}
	close(ids)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := len(w.Open()); n != behind {
		t.Fatalf("%d processes open behind the reader; want %d", n, behind)
	}
	pruned, err := r.Prune(ctx, time.Now().Add(time.Hour))
	if err != nil || len(pruned) != behind+1 {
		t.Fatalf("pruned %v, %v; want every process", pruned, err)
	}
	release()
	testenv.WaitFor(t, 10*time.Second, func() error {
		if open := w.Open(); len(open) != 0 {
			return fmt.Errorf("the worker holds %d pruned processes: %v", len(open), open)
		}
		return nil
	})
}

// An awaiter that comes after an attempt here wrote the end, while the
// worker's reader has not folded it yet, is told the end at once: the
// worker holds the process open, so the awaiter waits on the worker's
// word, which must not have been spent before it came.
func TestAwaitAfterAnEndWrittenHere(t *testing.T) {
	ctx, r, w, held, _ := heldWorker(t, 0)
	reg := Registration{Input: Input{Kind: ToolCall, Tool: "echo", Args: json.RawMessage(`{}`)}, Disposition: OwnerBound, Provenance: Provenance{Host: "h"}}
	register := func(id string) {
		if p, created, err := r.Register(ctx, id, reg); err != nil || !created || !p.InAttempt() {
			t.Fatalf("register %s: %+v, created %v, %v; want it begun here", id, p, created, err)
		}
	}
	register("first")
	<-held // the reader holds at first's end: it folds nothing after it
	register("second")
	testenv.WaitFor(t, 10*time.Second, func() error {
		p, err := r.Get(ctx, "second")
		if err != nil || !p.Ended() {
			return fmt.Errorf("second's end not written yet: %+v, %v", p, err)
		}
		return nil
	})
	if open := w.Open(); !slices.Contains(open, "second") {
		t.Fatalf("the worker does not hold second open (%v): the case is not made", open)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if p, err := r.Await(actx, "second"); err != nil || p.Status() != Completed {
		t.Fatalf("await after the end: %+v, %v", p, err)
	}
}
