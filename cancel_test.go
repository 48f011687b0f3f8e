package lash

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

// A cancel sent while a turn runs stops it at its next checkpoint: the
// model is not called again. A cancel with no turn running ends the turn it
// starts at once.
func TestCancel(t *testing.T) {
	r := newRig(t)
	var other *Session
	n := r.node("a", onceAt("before-record checkpoint", func() {
		if _, err := other.Cancel(context.Background(), "stop-1"); err != nil {
			t.Error(err)
		}
	}))
	other = r.node("sender").Session("s1")
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Outcome.Termination.Reason != turn.Cancelled {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if r.models.Requests() != 1 {
		t.Fatalf("model called %d times after the cancel", r.models.Requests())
	}
	if _, err := s.Cancel(r.ctx, "stop-2"); err != nil {
		t.Fatal(err)
	}
	res, err = s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Outcome.Termination.Reason != turn.Cancelled || r.models.Requests() != 1 {
		t.Fatalf("cancel with no turn running: %+v, %v, %d model calls", res, err, r.models.Requests())
	}
}

// A running turn publishes its progress on the session's live subject.
func TestLiveEvents(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	watch := r.conn()
	var mu sync.Mutex
	var events []live.Event
	sub, err := watch.Subscribe("lash.live.s1", func(m *nats.Msg) {
		var ev live.Event
		if err := json.Unmarshal(m.Data, &ev); err == nil {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	watch.Flush()
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		var types []string
		for _, ev := range events {
			types = append(types, ev.Type)
		}
		all := strings.Join(types, " ")
		for _, want := range []string{"run_started", "tool_started", "tool_finished", "run_finished", "message", "turn_committed"} {
			if !strings.Contains(all, want) {
				return &missing{want, all}
			}
		}
		return nil
	})
}

type missing struct{ want, got string }

func (m *missing) Error() string { return "no " + m.want + " event in: " + m.got }

// Turn.Stream returns the input's turn and hands its live events over as
// they come.
func TestTurnStream(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	var types []string
	res, err := n.Session("s1").Turn("k1", Input{Text: "Weather in Oslo, Lima and Pune?"}).Stream(r.ctx, func(ev live.Event) {
		types = append(types, ev.Type)
	})
	if err != nil || res.Turn != "in-1" || res.Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("turn %+v, %v", res, err)
	}
	all := strings.Join(types, " ")
	if !strings.Contains(all, "tool_started") || !strings.Contains(all, "run_finished") {
		t.Fatalf("live events: %s", all)
	}
}

// A cancel the session refuses (its key too long, or a key an earlier input
// took for other content) interrupts nothing: the effect in flight runs on
// until a cancel that counts comes, and that one is the turn's cause.
func TestRefusedCancelInterruptsNothing(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(injectPairScript))
	var started atomic.Int32
	reg := tools.New()
	slow, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a weatherArgs) (string, error) {
		started.Add(1)
		<-ctx.Done()
		return "", ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(slow); err != nil {
		t.Fatal(err)
	}
	n := r.node("a", WithTools(reg))
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo and Lima?"}); err != nil {
		t.Fatal(err)
	}
	type ran struct {
		res []TurnResult
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := s.Run(context.Background())
		done <- ran{res, err}
	}()
	testenv.WaitFor(t, 10*time.Second, func() error {
		if started.Load() != 2 {
			return fmt.Errorf("%d calls running", started.Load())
		}
		return nil
	})
	nc := r.conn()
	for _, key := range []string{"k1", strings.Repeat("x", 300)} {
		m := nats.NewMsg("lash.sess.s1.decide")
		m.Data = []byte(`{"cancel":true}`)
		m.Header.Set("Nats-Msg-Id", key)
		if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := s.Cancel(r.ctx, "stop-1")
	if err != nil {
		t.Fatal(err)
	}
	var got ran
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the turn was not cancelled")
	}
	if got.err != nil || len(got.res) != 1 {
		t.Fatalf("run: %+v, %v", got.res, got.err)
	}
	term := got.res[0].Outcome.Termination
	if want := fmt.Sprintf("cancelled by input %d", seq); term.Reason != turn.Cancelled || !strings.Contains(term.Detail, want) {
		t.Fatalf("termination %+v; want %q", term, want)
	}
}

// A node that dies while it claims the calls a cancel stopped leaves some
// unclaimed: the next run claims them too instead of running them, and the
// turn ends cancelled with no tool run again.
func TestCancelClaimsEveryStoppedCall(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(injectPairScript))
	var started, runs atomic.Int32
	reg := tools.New()
	slow, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a weatherArgs) (string, error) {
		runs.Add(1)
		started.Add(1)
		<-ctx.Done()
		return "", ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(slow); err != nil {
		t.Fatal(err)
	}
	conn := r.conn()
	var hit atomic.Bool
	first := r.nodeOn(conn, "first", WithTools(reg), withBoundary(func(name string) error {
		if name == "after-record cancel call_1" {
			hit.Store(true)
			conn.Close()
			return errCrash
		}
		return nil
	}))
	s := first.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo and Lima?"}); err != nil {
		t.Fatal(err)
	}
	crashed := make(chan error, 1)
	go func() {
		_, err := s.Run(context.Background())
		crashed <- err
	}()
	testenv.WaitFor(t, 10*time.Second, func() error {
		if started.Load() != 2 {
			return fmt.Errorf("%d calls running", started.Load())
		}
		return nil
	})
	if _, err := r.node("sender").Session("s1").Cancel(r.ctx, "stop-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-crashed:
		if err == nil || !hit.Load() {
			t.Fatalf("first node: %v, crashed %v", err, hit.Load())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first node did not stop")
	}
	first.Close(context.Background())
	second := r.node("second", WithTools(reg))
	res := runUntilFree(t, second.Session("s1"))
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.Cancelled || runs.Load() != 2 {
		t.Fatalf("second node: %+v; tool runs %d", res, runs.Load())
	}
	rep, err := NewInspector(second.Streams()).VerifyRecorded(r.ctx, turn.Hooks{}, "s1", "")
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// A cancel naming its turn stops that turn, and only it: sent after the
// turn committed, it is consumed as stale and the next turn runs to its
// end; one naming the running turn stops it.
func TestStopNamesItsTurn(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	s := n.Session("s1")
	seq, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Turn != fmt.Sprintf("in-%d", seq) || res[0].Outcome.Termination.Reason == turn.Cancelled {
		t.Fatalf("first turn: %+v, %v", res, err)
	}
	// The late stop, then the next message: the stop is stale.
	if _, _, err := s.Send(r.ctx, "stop-late", Input{Cancel: true, Turn: res[0].Turn}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Send(r.ctx, "k2", Input{Text: "And in Quito?"}); err != nil {
		t.Fatal(err)
	}
	calls := r.models.Requests()
	res, err = s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Outcome.Termination.Reason == turn.Cancelled || r.models.Requests() == calls {
		t.Fatalf("the turn after a stale stop: %+v, %v", res, err)
	}
	if res, err := s.Run(r.ctx); err != nil || len(res) != 0 {
		t.Fatalf("inputs left to run: %+v, %v", res, err)
	}
	// A stop naming a later input, or a malformed turn, is refused.
	for _, bad := range []string{"in-999999", "in-01", "turn-3", "in-"} {
		if _, _, err := s.Send(r.ctx, "bad-"+bad, Input{Cancel: true, Turn: bad}); bad != "in-999999" && err == nil {
			t.Fatalf("turn %q accepted", bad)
		}
	}
	// A stop that names the turn about to run stops it at its first
	// checkpoint.
	seq, _, err = s.Send(r.ctx, "k3", Input{Text: "And in Lagos?"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Send(r.ctx, "stop-now", Input{Cancel: true, Turn: fmt.Sprintf("in-%d", seq)}); err != nil {
		t.Fatal(err)
	}
	calls = r.models.Requests()
	res, err = s.Run(r.ctx)
	if err != nil || len(res) == 0 || res[0].Outcome.Termination.Reason != turn.Cancelled || r.models.Requests() > calls+1 {
		t.Fatalf("the named turn: %+v, %v, %d model calls", res, err, r.models.Requests()-calls)
	}
	// A stop naming an input of another session starts no turn here.
	otherSeq, _, err := n.Session("s2").Send(r.ctx, "k1", Input{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Send(r.ctx, "stop-other", Input{Cancel: true, Turn: fmt.Sprintf("in-%d", otherSeq)}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Run(r.ctx); err != nil || len(res) != 0 {
		t.Fatalf("a stop of another session's input ran: %+v, %v", res, err)
	}
}
