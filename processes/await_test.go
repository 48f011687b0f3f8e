package processes

import (
	"context"
	"errors"
	"testing"
	"time"

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

// countReads counts the reads of a process's log.
type countReads struct {
	*streams.Client
	reads, tails int
}

func (s *countReads) Read(ctx context.Context, filter string, from uint64, fn func(*streams.Msg) error) error {
	s.reads++
	return s.Client.Read(ctx, filter, from, fn)
}

func (s *countReads) Tail(ctx context.Context, st streams.Stream, filters []string, from uint64, fn func(*streams.Msg, uint64) error) error {
	s.tails++
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
