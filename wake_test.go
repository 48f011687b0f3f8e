package lash

import (
	"context"
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
}

// A decision for a call the session does not hold suspended is consumed by
// a turn that records the error and changes nothing else.
func TestDecisionForNoCall(t *testing.T) {
	r := newRig(t)
	n := r.node("one")
	s := n.Session("nobody")
	if _, _, err := n.log.AppendInput(r.ctx, "nobody", "k1", []byte(`{"decisions":[{"id":"d1","call_id":"c9","action":"resume"}]}`)); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Outcome.Termination.Code != "invalid_input" || len(res[0].Outcome.Messages) != 0 ||
		!strings.Contains(res[0].Outcome.Termination.Detail, "no suspended call") {
		t.Fatalf("run %+v, %v", res, err)
	}
}
