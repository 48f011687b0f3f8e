package lash

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

// The tool calls a model answer asks for need no intents of their own: the
// answer's record stands for them. A run that stops between that record
// and the calls' start leaves them in doubt, and the next run tells the
// tools so; a run that wrote the answer itself runs them as first attempts.
func TestAnswerStandsForIntents(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var seen []string
	reg := tools.New()
	tool, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a weatherArgs) (string, error) {
		info, _ := tools.Info(ctx)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s attempt=%d in_doubt=%v", a.City, info.Attempt, info.InDoubt))
		mu.Unlock()
		return "fine", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	calls := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(seen)
		slices.Sort(out)
		seen = nil
		return out
	}
	journaled := watchJournal(t, r)
	stop := errors.New("stopped after the model's answer was recorded")
	answered := "after-record " + turn.KindLLMCall.String() + " 2"
	first := r.node("first", WithTools(reg), withBoundary(func(name string) error {
		if name == answered {
			return stop
		}
		return nil
	}))
	second := r.node("second", WithTools(reg))

	// A run that records the answer and runs its calls: first attempts.
	if _, _, err := second.Session("clean").Send(r.ctx, "k", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	if res, err := second.Session("clean").Run(r.ctx); err != nil || len(res) != 1 {
		t.Fatalf("clean run: %v, %v", res, err)
	}
	want := []string{"Lima attempt=1 in_doubt=false", "Oslo attempt=1 in_doubt=false", "Pune attempt=1 in_doubt=false"}
	if got := calls(); !slices.Equal(got, want) {
		t.Fatalf("clean run called %v, want %v", got, want)
	}

	// A run that stops right after recording the answer: the calls may
	// have started, as far as anyone reading the journal can tell.
	seq, _, err := first.Session("stopped").Send(r.ctx, "k", Input{Text: "Weather?"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Session("stopped").Run(r.ctx); !errors.Is(err, stop) {
		t.Fatalf("first run: %v", err)
	}
	if got := calls(); len(got) != 0 {
		t.Fatalf("the stopped run called %v", got)
	}
	j := effectlog.New(first.Streams())
	key := turn.ReplayKey{Session: "stopped", Turn: turnID(seq), Iteration: 1, Kind: turn.KindToolCall, Effect: 3, Call: "call_1"}
	if doubt, err := j.InDoubt(r.ctx, key); err != nil || !doubt {
		t.Fatalf("a call the recorded answer asked for: in doubt %v, %v", doubt, err)
	}
	// The turn's journal shows the three calls as started, not recorded,
	// and a call with an intent of its own (as a resumed call writes).
	tid := turnID(seq)
	started := effectlog.New(first.Streams(), effectlog.WithRecorder("other/run-1"))
	if err := started.Started(r.ctx, turn.ReplayKey{Session: "stopped", Turn: tid, Iteration: 1, Kind: turn.KindToolCall, Effect: 3, Call: "call:9"}, 1); err != nil {
		t.Fatal(err)
	}
	insp := NewInspector(first.Streams())
	js, err := insp.Journal(r.ctx, "stopped", turnID(seq))
	if err != nil {
		t.Fatal(err)
	}
	var doubtful []string
	for _, e := range js {
		if e.InDoubt {
			doubtful = append(doubtful, e.Name+" "+e.Recorder)
		}
	}
	if want := []string{"stopped/" + tid + "/1/tool-call/3/call:9 other", "stopped/" + tid + "/1/tool-call/3/call_1 first",
		"stopped/" + tid + "/1/tool-call/3/call_2 first", "stopped/" + tid + "/1/tool-call/3/call_3 first"}; !slices.Equal(doubtful, want) {
		t.Fatalf("calls in doubt: %q, want %q", doubtful, want)
	}
	res := runUntilFree(t, second.Session("stopped"))
	if js, err = insp.Journal(r.ctx, "stopped", tid); err != nil {
		t.Fatal(err)
	}
	for _, e := range js {
		if e.InDoubt || !e.Replayed && !e.Executed {
			t.Fatalf("after the commit: %+v", e)
		}
	}
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("second run: %+v", res)
	}
	want = []string{"Lima attempt=2 in_doubt=true", "Oslo attempt=2 in_doubt=true", "Pune attempt=2 in_doubt=true"}
	if got := calls(); !slices.Equal(got, want) {
		t.Fatalf("the run after the stop called %v, want %v", got, want)
	}
	if doubt, err := j.InDoubt(r.ctx, key); err != nil || doubt {
		t.Fatalf("a recorded call: in doubt %v, %v", doubt, err)
	}

	// Neither session's runs wrote an intent (the one there is the
	// test's); both wrote records.
	records, intents := 0, 0
	for _, m := range journaled() {
		if strings.HasSuffix(m, ".i") && !strings.Contains(m, ".3.=") {
			intents++
		} else {
			records++
		}
	}
	if intents != 0 || records < 10 {
		t.Fatalf("the runs wrote %d intents and %d records", intents, records)
	}
}

// A checkpoint right after a model answer without tool calls, or after a
// round of one call, is answered in that effect's record: a turn of one
// call writes four records for its six effects. After a round of three
// calls the checkpoint has its own record (a call must not wait for the
// others to be recorded).
func TestCheckpointAnsweredInRecordBefore(t *testing.T) {
	cases := []struct {
		name, script, text string
		records, effects   int
	}{
		// sync, model, the call (+ checkpoint), model (+ checkpoint)
		{"one call", injectScript, "Weather in Oslo?", 4, 6},
		// sync, model, three calls, checkpoint, model (+ checkpoint)
		{"three calls", weatherScript, "Weather in Oslo, Lima and Pune?", 7, 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			r.models = testenv.RunModelServer(t, scripted.MustParse(c.script))
			node := r.node("a")
			journaled := watchJournal(t, r)
			s := node.Session("s1")
			if _, _, err := s.Send(r.ctx, "k", Input{Text: c.text}); err != nil {
				t.Fatal(err)
			}
			res, err := s.Run(r.ctx)
			if err != nil || len(res) != 1 {
				t.Fatalf("run: %+v, %v", res, err)
			}
			if records := len(journaled()); res[0].Executed != c.effects || records != c.records {
				t.Fatalf("%d effects executed with %d records, want %d with %d", res[0].Executed, records, c.effects, c.records)
			}
		})
	}
}

// A record that would not fit with the next checkpoint's answer goes
// without it (the checkpoint then records on its own); one that fits
// keeps it.
func TestRecordDropsNextOverCeiling(t *testing.T) {
	next := &answer{Messages: []turn.Message{{Role: turn.RoleUser, Text: strings.Repeat("x", 4096)}}, Cursor: 9}
	a := &answer{Result: &turn.ToolResult{CallID: "c1", Status: turn.ToolOK, Output: "ok"}, Next: next}
	alone, err := encodeAnswer(&answer{Result: a.Result})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		max  int64
		keep bool
	}{{1 << 20, true}, {int64(len(alone)) + 100, false}} {
		b := *a
		data, err := encodeRecord(&b, c.max)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeAnswer(data)
		if err != nil || (got.Next != nil) != c.keep || int64(len(data)) > c.max {
			t.Fatalf("max %d: %d bytes, next kept %v, %v", c.max, len(data), got.Next != nil, err)
		}
		if c.keep && (got.Next.Cursor != 9 || len(got.Next.Messages) != 1) {
			t.Fatalf("next %+v", got.Next)
		}
	}
}

// watchJournal returns what lists the subjects of every journal write of
// the test so far, seen as each is published. A channel subscription
// takes each message on the connection's reader, so after a flush every
// write the server sent is in the channel (a callback may still be
// pending then).
func watchJournal(t *testing.T, r *rig) func() []string {
	t.Helper()
	var subjects []string
	nc := r.conn()
	ch := make(chan *nats.Msg, 1<<12)
	sub, err := nc.ChanSubscribe(r.node("watch").Streams().Config().Prefix+".fx.>", ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-ch:
				subjects = append(subjects, m.Subject)
			default:
				return slices.Clone(subjects)
			}
		}
	}
}

// roundsScript calls the weather tool while the turn asked for "five" has
// made fewer than five calls, and "one" fewer than one.
const roundsScript = `
rule five
  when user contains five
  when tools < 5
  call weather {"city":"Oslo"}

rule one
  when user contains one
  when tools < 1
  call weather {"city":"Oslo"}

rule tomorrow
  when user contains tomorrow
  say Tomorrow looks the same.

default
  say done
`

// Between tool rounds a checkpoint reads the inputs only when something was
// published on the session's input subjects since its last read (ADR
// 0017): a turn of five rounds reads them as often as a turn of one. An
// input sent during such a turn is still taken by it, once.
func TestCheckpointsReadOnArrival(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(roundsScript))
	spy := r.conn()
	gets, err := spy.SubscribeSync("$JS.API.DIRECT.GET.>")
	if err != nil {
		t.Fatal(err)
	}
	// Reads of a session's input subjects since the last call: the server
	// queued their copies to the spy before it answered them, and before
	// the spy's flush.
	reads := func(session string) int {
		t.Helper()
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			m, err := gets.NextMsg(0)
			if err != nil {
				return n
			}
			if strings.Contains(string(m.Data), "."+session+".in\"") {
				n++
			}
		}
	}
	var sender *Session
	sent := false
	n := r.node("a", withBoundary(func(name string) error {
		if name == "before-record tool call_2" && !sent {
			sent = true
			if _, _, err := sender.Send(context.Background(), "k2", Input{Text: "and tomorrow?"}); err != nil {
				t.Error(err)
			}
		}
		return nil
	}))
	run := func(session, text string) []TurnResult {
		t.Helper()
		s := n.Session(session)
		if _, _, err := s.Send(r.ctx, "k1", Input{Text: text}); err != nil {
			t.Fatal(err)
		}
		reads(session)
		res, err := s.Run(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	run("one", "one")
	one := reads("one")
	sent = true // no input during this turn
	run("five", "five")
	if five := reads("five"); five != one || one == 0 {
		t.Fatalf("a turn of five tool rounds read its inputs %d times, a turn of one %d", five, one)
	}
	// An input sent during the second round of a turn joins it.
	sender = r.node("sender").Session("steered")
	sent = false
	if res := run("steered", "five"); len(res) != 1 || !sent {
		t.Fatalf("%d turns (sent %v); the input sent during the turn must not start another", len(res), sent)
	}
	tr, err := n.Session("steered").Transcript(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	taken := 0
	for _, m := range tr {
		if m.Role == turn.RoleUser && m.Text == "and tomorrow?" {
			taken++
		}
	}
	if taken != 1 {
		t.Fatalf("the input sent during the turn was taken %d times", taken)
	}
}
