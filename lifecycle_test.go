package lash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/lifecycle"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
)

const retentionScript = `
rule settle
  when user contains settle
  when tools = 0
  call settle {}

rule nap
  when user contains nap
  when tools = 0
  call sleep {"seconds":1}

rule stuck
  when user contains stuck
  hang

default
  say done waiting
`

// settleTools: "settle" charges once (a durable step that appends to a
// file), then waits for the event "approval"; plus the built-in tools.
func settleTools(t *testing.T, charges string) *tools.Registry {
	reg := tools.New()
	settle, err := tools.Func("settle", "charge, then wait for approval", func(ctx context.Context, _ struct{}) (string, error) {
		n, err := tools.Step(ctx, "charge", func(ctx context.Context) (int, error) {
			f, err := os.OpenFile(charges, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return 0, err
			}
			defer f.Close()
			fmt.Fprintln(f, "charged")
			return 42, nil
		})
		if err != nil {
			return "", err
		}
		v, err := tools.AwaitEvent(ctx, "approval", 0)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("charged %d, approved %s", n, v), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(settle); err != nil {
		t.Fatal(err)
	}
	if err := builtin.Register(reg, "lash", time.Now); err != nil {
		t.Fatal(err)
	}
	return reg
}

// A sweep long after everything, with the retention at a second, removes
// nothing live: a call parked past the retention resumes and runs none of
// its recorded steps again; a sleep that fired while no node ran still
// wakes its session once one does; a turn not committed keeps its journal.
func TestSweepKeepsWhatIsLive(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(retentionScript))
	charges := filepath.Join(t.TempDir(), "charges")
	reg := settleTools(t, charges)
	start := func(id string) (*Node, func()) {
		n := r.node(id, WithTools(reg), WithProjection(t.TempDir()), WithSecret(testSecret))
		ctx, cancel := context.WithCancel(r.ctx)
		done := make(chan struct{}, 2)
		go func() { n.Serve(ctx); done <- struct{}{} }()
		go func() { n.Wake(ctx); done <- struct{}{} }()
		var stopped bool
		stop := func() {
			if !stopped {
				stopped = true
				cancel()
				<-done
				<-done
				n.Close(context.Background())
			}
		}
		t.Cleanup(stop)
		return n, stop
	}
	a, stopA := start("a")
	c := a.Streams()
	// A call charged and parked, a turn stuck in its model call, a sleep.
	for _, in := range []struct{ session, text string }{{"buyer", "settle"}, {"stuck", "stuck"}, {"napper", "nap"}} {
		if _, _, err := a.Session(in.session).Send(r.ctx, "k1", Input{Text: in.text}); err != nil {
			t.Fatal(err)
		}
	}
	parkedOn(t, a, "buyer")
	testenv.WaitFor(t, 20*time.Second, func() error {
		if ts := turnsOf(t, a, "napper"); len(ts) != 1 || ts[0].Suspended != 1 {
			return fmt.Errorf("napper's turns %+v", ts)
		}
		return nil
	})
	stuckJournal, err := c.Subjects().SessionRecords("stuck")
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		_, err := c.NextOnSubject(r.ctx, stuckJournal, 1)
		return err
	})
	// No node runs; the sleep fires meanwhile.
	stopA()
	due, _ := c.Subjects().TimerDue(timerSleep, "napper", "call_1")
	testenv.WaitFor(t, 20*time.Second, func() error {
		_, err := c.Head(r.ctx, due)
		return err
	})
	// It never expires: however long no node runs, it waits for one.
	if m, err := c.Head(r.ctx, due); err != nil || m.Header.Get("Nats-TTL") != "" {
		t.Fatalf("the fired sleep: %v, TTL %q", err, m.Header.Get("Nats-TTL"))
	}
	// A week later, with the retention at a second.
	swept, err := lifecycle.Sweep(r.ctx, c, lifecycle.SweepConfig{Retention: time.Second, MarkTTL: time.Second, Grace: time.Second,
		Now: func() time.Time { return time.Now().Add(7 * 24 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("swept %+v", swept)
	if _, err := c.NextOnSubject(r.ctx, stuckJournal, 1); err != nil {
		t.Fatalf("the stuck turn's journal after the sweep: %v", err)
	}
	steps, _ := c.Subjects().EffectStep("buyer", "call_1", "charge")
	if _, err := c.Head(r.ctx, steps); err != nil {
		t.Fatalf("the parked call's step after the sweep: %v", err)
	}
	if _, err := c.Head(r.ctx, due); err != nil {
		t.Fatalf("the fired sleep after the sweep: %v", err)
	}
	if swept.Journals == 0 {
		t.Fatal("the sweep dropped no committed turn's journal: it shows nothing")
	}

	// A node again: the sleep wakes its session, and the resolved call runs
	// again without charging twice.
	b, _ := start("b")
	if got := lastAnswer(t, b.Session("napper")); !strings.HasPrefix(got.Text, "slept until") {
		t.Fatalf("napper: %q", got.Text)
	}
	id, key := keyOf(t, b, "buyer")
	resolveEvent(t, r.conn(), id, key, `"yes"`)
	tr := waitForAnswer(t, b.Session("buyer"), "done waiting")
	var result string
	for _, m := range tr {
		if m.Role == turn.RoleTool && !m.Pending {
			result = m.Text
		}
	}
	if result != `charged 42, approved "yes"` {
		t.Fatalf("the resumed call: %q", result)
	}
	data, err := os.ReadFile(charges)
	if err != nil || strings.Count(string(data), "charged") != 1 {
		t.Fatalf("charges %q, %v; want one", data, err)
	}
	// Once done, the fired sleep is gone: nothing keeps it.
	testenv.WaitFor(t, 20*time.Second, func() error {
		if _, err := c.Head(r.ctx, due); !errors.Is(err, streams.ErrNotFound) {
			return fmt.Errorf("the handled sleep's message: %v", err)
		}
		return nil
	})
}
