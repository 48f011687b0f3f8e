package lash

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/testenv"
)

const echoScript = `
default
  say noted
`

// Two nodes serve one deployment. One dies in the middle of a turn; every
// input is still consumed by exactly one committed turn, each model request
// is made once, and no session ever ran on two nodes at once.
func TestServeAcrossNodes(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(echoScript))
	conn := r.conn()
	var once sync.Once
	died := make(chan struct{})
	first := r.nodeOn(conn, "first", withBoundary(func(name string) error {
		if name != "after-record llm-call" {
			return nil
		}
		hit := false
		once.Do(func() { hit = true })
		if hit {
			conn.Close() // the node dies: no ack, no release, no renewals
			close(died)
			return errCrash
		}
		return nil
	}), WithConcurrency(1))
	second := r.node("second")
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	const sessions, inputs = 6, 2
	sender := r.node("sender")
	for i := range sessions {
		for j := range inputs {
			in := Input{Text: fmt.Sprintf("session %d says %d", i, j)}
			if _, _, err := sender.Session(fmt.Sprintf("s%d", i)).Send(r.ctx, fmt.Sprintf("k%d", j), in); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The first node serves alone, one session at a time, until it dies
	// with a recorded model call; then the second takes over.
	var wg sync.WaitGroup
	serve := func(n *Node) {
		wg.Add(1)
		go func() { defer wg.Done(); n.Serve(ctx) }()
	}
	serve(first)
	select {
	case <-died:
	case <-time.After(30 * time.Second):
		t.Fatal("the first node never reached its crash point")
	}
	serve(second)
	// Every input ends up in exactly one turn: its own, or injected into
	// the turn before it at a checkpoint when it was already waiting.
	testenv.WaitFor(t, 60*time.Second, func() error {
		for i := range sessions {
			tr, err := sender.Session(fmt.Sprintf("s%d", i)).Transcript(r.ctx)
			if err != nil {
				return err
			}
			for j := range inputs {
				text, n := fmt.Sprintf("session %d says %d", i, j), 0
				for _, m := range tr {
					if m.Text == text {
						n++
					}
				}
				if n != 1 {
					return fmt.Errorf("session s%d: input %d appears %d times", i, j, n)
				}
			}
		}
		return nil
	})
	cancel()
	wg.Wait()
	for _, h := range r.models.Seen() {
		if c := r.models.Count(h.Hash); c != 1 {
			t.Errorf("model request %q made %d times", h.Summary, c)
		}
	}
	// Each commit follows a fence of its own token: one writer at a time.
	for i := range sessions {
		var token uint64
		err := sessionlog.New(sender.Streams()).Read(r.ctx, fmt.Sprintf("s%d", i), 0, func(_ uint64, e *sessionlog.Entry) error {
			if e.Kind == sessionlog.KindFence {
				if e.Token <= token {
					t.Errorf("session s%d: fence %d after %d", i, e.Token, token)
				}
				token = e.Token
			} else if e.Token != token {
				t.Errorf("session s%d: commit under %d after fence %d", i, e.Token, token)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A busy input comes back soon at first, then less often, and never later
// than the holder's lease can live without a renewal.
func TestBusyDelay(t *testing.T) {
	const ttl = 15 * time.Second
	if d := busyDelay(ErrBusy, 1, ttl); d != 20*time.Millisecond {
		t.Fatalf("first delay %v, want 20ms", d)
	}
	if d := busyDelay(ErrBusy, 4, ttl); d != 160*time.Millisecond {
		t.Fatalf("fourth delay %v, want 160ms", d)
	}
	if d := busyDelay(ErrBusy, 40, ttl); d != ttl/2 {
		t.Fatalf("delay after many deliveries without a holder's renewal time %v, want %v", d, ttl/2)
	}
	busy := fmt.Errorf("%w: %w", ErrBusy, &leases.BusyError{Key: "sess.s", Renewed: time.Now().Add(-14 * time.Second)})
	if d := busyDelay(busy, 40, ttl); d > 1100*time.Millisecond || d < 900*time.Millisecond {
		t.Fatalf("delay with a lease renewed 14s ago (TTL 15s) %v, want about 1s", d)
	}
	stale := fmt.Errorf("%w: %w", ErrBusy, &leases.BusyError{Key: "sess.s", Renewed: time.Now().Add(-time.Hour)})
	if d := busyDelay(stale, 40, ttl); d != 50*time.Millisecond {
		t.Fatalf("delay with a lease long overdue %v, want 50ms", d)
	}
}
