package lash

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go/jetstream"
)

const waitScript = `
rule nap
  when user contains nap
  when tools = 0
  call sleep {"seconds":1}

rule deploy
  when user contains deploy
  when tools = 0
  call wait_for_signal {"name":"deploy.42"}

default
  say done waiting
`

// builtinNode serves and wakes with the built-in tools and a projection.
func builtinNode(t *testing.T, r *rig) (*Node, context.Context) {
	t.Helper()
	r.models = testenv.RunModelServer(t, scripted.MustParse(waitScript))
	reg := tools.New()
	if err := builtin.Register(reg, "lash", time.Now); err != nil {
		t.Fatal(err)
	}
	n := r.node("waker", WithTools(reg), WithProjection(t.TempDir()))
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 2)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return n, ctx
}

// lastAnswer waits for the session's transcript to end with the model's
// final answer and returns the tool result before it.
func lastAnswer(t *testing.T, s *Session) turn.Message {
	t.Helper()
	var tr []turn.Message
	testenv.WaitFor(t, 20*time.Second, func() error {
		var err error
		if tr, err = s.Transcript(context.Background()); err != nil {
			return err
		}
		if len(tr) == 0 || tr[len(tr)-1].Text != "done waiting" {
			return fmt.Errorf("the parked call is not answered yet: %s", describeTranscript(tr))
		}
		return nil
	})
	for i := len(tr) - 1; i >= 0; i-- {
		if tr[i].Role == turn.RoleTool && !tr[i].Pending {
			return tr[i]
		}
	}
	t.Fatalf("no tool result in %s", describeTranscript(tr))
	return turn.Message{}
}

// A durable sleep parks its call, holding nothing, and the waker resumes it
// once the time has come.
func TestSleepParksAndWakes(t *testing.T) {
	n, ctx := builtinNode(t, newRig(t))
	s := n.Session("napper")
	began := time.Now()
	if _, _, err := s.Send(ctx, "k1", Input{Text: "take a nap"}); err != nil {
		t.Fatal(err)
	}
	res := lastAnswer(t, s)
	if !strings.HasPrefix(res.Text, "slept until ") {
		t.Fatalf("sleep's result %q", res.Text)
	}
	if took := time.Since(began); took < time.Second {
		t.Fatalf("woke after %v, before the sleep ended", took)
	}
	turns, err := NewInspector(n.Streams()).Turns(ctx, "napper")
	if err != nil || len(turns) != 2 || turns[0].Termination.Reason != turn.Suspended || turns[0].Suspended != 1 {
		t.Fatalf("turns %+v, %v", turns, err)
	}
}

// A signal wait is resumed by a signal published after it parked, and by
// one published before: the signal's payload is the call's result.
func TestSignalWakesWait(t *testing.T) {
	n, ctx := builtinNode(t, newRig(t))
	c := n.Streams()
	publish := func(data string) {
		t.Helper()
		if _, _, err := c.Publish(ctx, streams.Publication{Subject: "lash.signal.deploy.42", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	after := n.Session("after")
	if _, _, err := after.Send(ctx, "k1", Input{Text: "deploy please"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		h, err := n.Projection().Session("after")
		if err == nil && h.Suspended != 1 {
			err = fmt.Errorf("%d calls suspended", h.Suspended)
		}
		return err
	})
	publish("not json") // set aside: nothing waiting can take it
	publish(`{"approved":"yes"}`)
	if res := lastAnswer(t, after); res.Text != `{"approved":"yes"}` {
		t.Fatalf("signal wait's result %q", res.Text)
	}
	// The latest signal is already there when this wait parks.
	before := n.Session("before")
	if _, _, err := before.Send(ctx, "k1", Input{Text: "deploy again"}); err != nil {
		t.Fatal(err)
	}
	if res := lastAnswer(t, before); res.Text != `{"approved":"yes"}` {
		t.Fatalf("signal wait's result %q", res.Text)
	}
	// The latest signal cannot be read: the wait takes the latest one that
	// can, and the unreadable one stays in the quarantine only.
	publish(`{"approved":"again"}`)
	publish("{garbage")
	late := n.Session("late")
	if _, _, err := late.Send(ctx, "k1", Input{Text: "deploy once more"}); err != nil {
		t.Fatal(err)
	}
	if res := lastAnswer(t, late); res.Text != `{"approved":"again"}` {
		t.Fatalf("signal wait's result %q", res.Text)
	}
}

// A signal within its bound always reaches the call waiting for it: quoted
// in a decision, its '<'s stay one byte each; and one that still grows
// past the session's input limit (invalid UTF-8 takes six bytes a byte)
// resumes the call with an error in its place, instead of coming back
// for good while the call stays parked.
func TestSignalOverInputLimitWhenQuoted(t *testing.T) {
	n, ctx := builtinNode(t, newRig(t))
	wait := func(session string) *Session {
		t.Helper()
		s := n.Session(session)
		if _, _, err := s.Send(ctx, "k1", Input{Text: "deploy please"}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 20*time.Second, func() error {
			h, err := n.Projection().Session(session)
			if err == nil && h.Suspended != 1 {
				err = fmt.Errorf("%d calls suspended", h.Suspended)
			}
			return err
		})
		return s
	}
	publish := func(data string) {
		t.Helper()
		if err := CheckSignal([]byte(data)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := n.Streams().Publish(ctx, streams.Publication{Subject: "lash.signal.deploy.42", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	s := wait("invalid")
	publish(`"` + strings.Repeat("\xff", 60000) + `"`)
	res := lastAnswer(t, s)
	if !strings.HasPrefix(res.Text, "lash: this call's result (") || !strings.Contains(res.Text, "over the deployment's input limit of 262144 bytes") {
		t.Fatalf("signal wait's result %.200q", res.Text)
	}
	// The next wait parks after the latest signal came, and takes it.
	angles := `"` + strings.Repeat("<", 60000) + `"`
	publish(angles)
	s = n.Session("angles")
	if _, _, err := s.Send(ctx, "k1", Input{Text: "deploy please"}); err != nil {
		t.Fatal(err)
	}
	if res := lastAnswer(t, s); res.Text != angles {
		t.Fatalf("signal wait's result is %d bytes, not the signal's %d", len(res.Text), len(angles))
	}
}

// A signal whose subject is over its bound wakes and delivers nothing, and
// the signals' quarantine lists it, as it lists one that is not JSON.
func TestLongSignalSubjectSetAside(t *testing.T) {
	r := newRig(t)
	n := r.node("a", WithProjection(t.TempDir()))
	subj := "lash.signal.deploy." + strings.Repeat("a", 1100)
	if _, _, err := n.Streams().Publish(r.ctx, streams.Publication{Subject: subj, Data: []byte(`{"ok":true}`)}); err != nil {
		t.Fatal(err)
	}
	m, err := n.Streams().Head(r.ctx, subj)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.signal(r.ctx, m); err != nil {
		t.Fatalf("signal: %v; want it passed over", err)
	}
	p := caughtUp(t, OpenSignalProjection, n.Streams())
	q, err := p.Quarantine()
	if err != nil || len(q) != 1 || q[0].Subject != subj || !strings.Contains(q[0].Reason, "at most 1024") {
		t.Fatalf("quarantine %+v, %v; want the signal with its reason", q, err)
	}
}

// A decision for a call the session does not hold suspended (decided
// already, say) starts no turn: it is consumed with the reason, and the
// projection sets it aside where operators look.
func TestDecisionForNoCall(t *testing.T) {
	r := newRig(t)
	n := r.node("one")
	s := n.Session("nobody")
	seq, _, err := n.log.AppendDecision(r.ctx, "nobody", "k1", []byte(`{"decisions":[{"id":"d1","call_id":"c9","action":"resume"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 0 {
		t.Fatalf("run %+v, %v", res, err)
	}
	p := caughtUp(t, OpenProjection, n.Streams())
	q, err := p.Quarantine()
	if err != nil || len(q) != 1 || q[0].Seq != seq || !strings.Contains(q[0].Reason, "holds none of the calls") {
		t.Fatalf("quarantine %+v, %v", q, err)
	}
	if h, err := p.Session("nobody"); err != nil || h.PendingInputs != 0 || h.Turns != 0 {
		t.Fatalf("head %+v, %v", h, err)
	}
}

const approvalScript = `
rule ask
  when tools = 0
  call wait_for_approval {"request":"ship it?"}

default
  say shipped
`

// With a decision wait, a turn parks its suspended call while it runs; a
// decision sent then, before any commit names the call, is taken and the
// same turn finishes.
func TestDecisionDuringDecisionWait(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(approvalScript))
	reg := tools.New()
	if err := builtin.Register(reg, "lash", time.Now); err != nil {
		t.Fatal(err)
	}
	n := r.node("one", WithTools(reg), WithMachine(turn.Config{Model: "scripted", DecisionWait: 20 * time.Second}))
	s := n.Session("dw")
	done := make(chan error, 1)
	var res *TurnResult
	go func() {
		var err error
		res, err = s.Turn("k1", Input{Text: "ship?"}).Run(r.ctx)
		done <- err
	}()
	testenv.WaitFor(t, 20*time.Second, func() error {
		js, err := NewInspector(n.Streams()).Journal(r.ctx, "dw", "in-1")
		if err == nil {
			for _, j := range js {
				if j.Call != "" {
					return nil
				}
			}
		}
		return fmt.Errorf("the approval call is not recorded yet (%v)", err)
	})
	if _, err := s.Decide(r.ctx, "d1", Decision{ID: "d1", CallID: "call_1", Action: "resume", Mode: "use-result", Payload: "yes"}); err != nil {
		t.Fatalf("a decision during the decision wait: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res.Turn != "in-1" || res.Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("turn %+v", res)
	}
	// With no turn running, an unknown call is still refused.
	if _, err := s.Decide(r.ctx, "d2", Decision{ID: "d2", CallID: "call_9", Action: "resume"}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("decision for no call: %v", err)
	}
}

const parkScript = `
rule park
  when user contains park
  when tools = 0
  call sleep {"seconds":3600}
  call wait_for_signal {"name":"deploy.7"}

rule deploy
  when user contains deploy
  when tools = 0
  call wait_for_signal {"name":"deploy.8"}

default
  say done waiting
`

// parkedNode is a node with the built-in tools whose model parks calls,
// serving and waking when wake is set.
func parkedNode(t *testing.T, r *rig, id string, wake bool, extra ...Option) *Node {
	t.Helper()
	r.models = testenv.RunModelServer(t, scripted.MustParse(parkScript))
	reg := tools.New()
	if err := builtin.Register(reg, "lash", time.Now); err != nil {
		t.Fatal(err)
	}
	n := r.node(id, append([]Option{WithTools(reg), WithProjection(t.TempDir())}, extra...)...)
	if wake {
		ctx, cancel := context.WithCancel(r.ctx)
		done := make(chan struct{}, 2)
		go func() { n.Serve(ctx); done <- struct{}{} }()
		go func() { n.Wake(ctx); done <- struct{}{} }()
		t.Cleanup(func() { cancel(); <-done; <-done })
	}
	return n
}

func turnsOf(t *testing.T, n *Node, session string) []TurnSummary {
	t.Helper()
	ts, err := NewInspector(n.Streams()).Turns(context.Background(), session)
	if err != nil && !errors.Is(err, ErrUnknownSession) {
		t.Fatal(err)
	}
	return ts
}

// Bad input and repeated signals leave parked calls parked: a signal wakes
// its call once however many come, and an unreadable input is consumed
// without touching the calls the session holds suspended.
func TestParkedCallsSurviveNoise(t *testing.T) {
	r := newRig(t)
	n := parkedNode(t, r, "one", true)
	s := n.Session("p")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "park it"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		if ts := turnsOf(t, n, "p"); len(ts) != 1 || ts[0].Suspended != 2 {
			return fmt.Errorf("turns %+v", ts)
		}
		return nil
	})
	if _, _, err := n.log.AppendInput(r.ctx, "p", "bad", []byte(`{"txt":"oops"}`)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, _, err := n.Streams().Publish(r.ctx, streams.Publication{Subject: "lash.signal.deploy.7", Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	// The bad input is consumed without a turn; one wake; the sleep stays
	// parked.
	testenv.WaitFor(t, 20*time.Second, func() error {
		ts := turnsOf(t, n, "p")
		if len(ts) < 2 {
			return fmt.Errorf("turns %+v", ts)
		}
		return nil
	})
	// Once every timer armed has fired and been handled, the waker has
	// nothing more to do.
	timersSettled(t, n)
	ts := turnsOf(t, n, "p")
	if len(ts) != 2 || ts[1].Suspended != 1 {
		t.Fatalf("turns %+v, want the first and one wake", ts)
	}
	if st, err := s.load(r.ctx); err != nil || st.cursor < ts[1].Input {
		t.Fatalf("state %+v, %v", st, err)
	}
	calls, err := n.parked(r.ctx)
	if err != nil || len(calls) != 1 || calls[0].ticket.Kind != builtin.SleepTicket {
		t.Fatalf("parked %+v, %v", calls, err)
	}
	ws, err := ParkedWaits(n.Projection())
	if err != nil || len(ws) != 1 || ws[0].Kind != builtin.SleepTicket || !strings.HasPrefix(ws[0].WokenBy, "timer at ") || ws[0].Until.IsZero() {
		t.Fatalf("parked waits %+v, %v", ws, err)
	}
}

// A signal published before its wait was committed wakes it even when the
// node that committed died before it could look: the sweep finds it.
func TestSignalBeforeWaitAcrossCrash(t *testing.T) {
	r := newRig(t)
	conn := r.conn()
	first := parkedNode(t, r, "first", false, withBoundary(func(name string) error {
		if name == "after-commit" {
			conn.Close()
			return errCrash
		}
		return nil
	}))
	_ = first
	if _, _, err := first.Streams().Publish(r.ctx, streams.Publication{Subject: "lash.signal.deploy.8", Data: []byte(`{"go":true}`)}); err != nil {
		t.Fatal(err)
	}
	s := first.Session("early")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "deploy"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); err == nil {
		t.Fatal("the first node should have died after its commit")
	}
	second := parkedNode(t, r, "second", true)
	if res := lastAnswer(t, second.Session("early")); res.Text != `{"go":true}` {
		t.Fatalf("the wait's result %q", res.Text)
	}
}

// A wake's key stays within the bound on keys whatever the call's id.
func TestWakeIDBounded(t *testing.T) {
	if got := wakeID("call_1"); got != "wake:call_1" {
		t.Fatalf("wakeID of a short id: %q", got)
	}
	long := strings.Repeat("c", streams.MaxIDBytes)
	a, b := wakeID(long), wakeID(long[:len(long)-1]+"d")
	if len(a) > streams.MaxIDBytes || a == b {
		t.Fatalf("wakeID of long ids: %q, %q", a, b)
	}
}

// timersSettled waits until every timer due (and every recheck) has fired
// and been handled: no such schedule is left and the nodes' timer consumer has nothing pending.
func timersSettled(t *testing.T, n *Node) {
	t.Helper()
	js, err := jetstream.New(n.Streams().Conn())
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		ctx := context.Background()
		var unfired []string
		err := n.Streams().Read(ctx, "lash.timer.at.>", 0, func(m *streams.Msg) error {
			at, err := time.Parse(time.RFC3339, strings.TrimPrefix(m.Header.Get(jetstream.ScheduleHeader), "@at "))
			if err != nil || !at.After(time.Now()) || strings.Contains(m.Subject, ".timer.at."+timerRecheck+".") {
				unfired = append(unfired, m.Subject) // due, or a recheck (due within seconds)
			}
			return nil
		})
		if err != nil || len(unfired) > 0 {
			return fmt.Errorf("timers due and not fired yet: %v (%v)", unfired, err)
		}
		c, err := js.Consumer(ctx, n.Streams().StreamName(streams.Timers), timerConsumer)
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("timer consumer: %d pending, %d unacknowledged", info.NumPending, info.NumAckPending)
		}
		return nil
	})
}
