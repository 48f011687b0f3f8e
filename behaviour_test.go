package lash

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

const injectScript = `
rule lookup
  when tools = 0
  call weather {"city":"Oslo"}

rule tomorrow
  when user contains tomorrow
  say Tomorrow looks the same.

default
  say Oslo is cold.
`

// injectPairScript asks for two calls in one round: the checkpoint after
// it has a record of its own.
const injectPairScript = `
rule lookup
  when tools = 0
  call weather {"city":"Oslo"}
  call weather {"city":"Lima"}

rule tomorrow
  when user contains tomorrow
  say Tomorrow looks the same.

default
  say Oslo is cold.
`

// An input sent while a turn runs is injected at its next checkpoint, once;
// also when the node dies right after the record that holds that
// checkpoint's answer: the call's own after a round of one call, the
// checkpoint's after a round of two.
func TestInputInjectedAtCheckpoint(t *testing.T) {
	cases := []struct {
		name, script, send, crashAt string
	}{
		{"one-call", injectScript, "before-record tool call_1", ""},
		{"one-call-crash", injectScript, "before-record tool call_1", "after-record tool call_1"},
		{"two-calls", injectPairScript, "before-record checkpoint", ""},
		{"two-calls-crash", injectPairScript, "before-record checkpoint", "after-record checkpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			r.models = testenv.RunModelServer(t, scripted.MustParse(c.script))
			conn := r.conn()
			var other *Session
			sent, crashed := false, false
			first := r.nodeOn(conn, "first", withBoundary(func(name string) error {
				switch {
				case name == c.send && !sent:
					sent = true
					if _, _, err := other.Send(context.Background(), "k2", Input{Text: "and tomorrow?"}); err != nil {
						t.Error(err)
					}
				case name == c.crashAt && !crashed:
					crashed = true
					conn.Close()
					return errCrash
				}
				return nil
			}))
			other = r.node("sender").Session("s1")
			s := first.Session("s1")
			if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
				t.Fatal(err)
			}
			res, err := s.Run(r.ctx)
			runner := first
			if c.crashAt != "" {
				if err == nil || !crashed {
					t.Fatalf("the first node did not crash: %v", err)
				}
				first.Close(context.Background())
				runner = r.node("second")
				res = append(res, runUntilFree(t, runner.Session("s1"))...)
			} else if err != nil {
				t.Fatal(err)
			}
			if !sent {
				t.Fatal("the input was never sent")
			}
			if len(res) != 1 {
				t.Fatalf("%d turns; the injected input must not start another", len(res))
			}
			tr, _ := runner.Session("s1").Transcript(r.ctx)
			injected := 0
			for _, m := range tr {
				if m.Role == turn.RoleUser && m.Text == "and tomorrow?" {
					injected++
				}
			}
			if injected != 1 || tr[len(tr)-1].Text != "Tomorrow looks the same." {
				t.Fatalf("injected %d times; transcript ends %q", injected, tr[len(tr)-1].Text)
			}
			if more, err := runner.Session("s1").Run(r.ctx); err != nil || len(more) != 0 {
				t.Fatalf("after the turn: %d more turns, %v", len(more), err)
			}
		})
	}
}

// The answer a call's record holds for the checkpoint after it stands: a
// run that finishes the turn after a crash takes it from the record and
// does not read the inputs again there, so an input sent after that record
// is injected at the next checkpoint (after the model's answer), not this one.
func TestCarriedCheckpointStands(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(injectScript))
	conn := r.conn()
	first := r.nodeOn(conn, "first", withBoundary(func(name string) error {
		if name == "after-record tool call_1" {
			conn.Close()
			return errCrash
		}
		return nil
	}))
	s := first.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); err == nil {
		t.Fatal("the first node did not crash")
	}
	first.Close(context.Background())
	second := r.node("second")
	if _, _, err := second.Session("s1").Send(r.ctx, "k2", Input{Text: "and tomorrow?"}); err != nil {
		t.Fatal(err)
	}
	res := runUntilFree(t, second.Session("s1"))
	if len(res) != 1 || res[0].Replayed == 0 {
		t.Fatalf("turns %+v", res)
	}
	tr, err := second.Session("s1").Transcript(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []turn.Message{{Role: turn.RoleUser, Text: "Weather in Oslo?"}, {Role: turn.RoleAssistant}, {Role: turn.RoleTool, Text: "2C snow"},
		{Role: turn.RoleAssistant, Text: "Oslo is cold."}, {Role: turn.RoleUser, Text: "and tomorrow?"}, {Role: turn.RoleAssistant, Text: "Tomorrow looks the same."}}
	ok := len(tr) == len(want)
	for k := 0; ok && k < len(want); k++ {
		ok = tr[k].Role == want[k].Role && tr[k].Text == want[k].Text
	}
	if !ok {
		t.Fatalf("transcript %+v", tr)
	}
}

// A cancel that comes after the only call of a round returned and was
// recorded, and interrupts the round before it ends, does not undo the
// round: the call's record is the only claim on it. The cancel is taken
// at a later checkpoint, and the turn ends cancelled, with the call's
// result, as a replay of its journal does.
func TestCancelAfterCallRecorded(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(injectScript))
	interrupted := make(chan struct{}, 1)
	var other *Session
	n := r.node("a", withBoundary(func(name string) error {
		switch name {
		case "after-record tool call_1":
			if _, err := other.Cancel(context.Background(), "stop-1"); err != nil {
				t.Error(err)
			}
			select { // the interrupt fires while the round is in flight
			case <-interrupted:
			case <-time.After(10 * time.Second):
				t.Error("the cancel did not interrupt the round")
			}
		case "interrupted":
			interrupted <- struct{}{}
		}
		return nil
	}))
	other = r.node("sender").Session("s1")
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Outcome.Termination.Reason != turn.Cancelled {
		t.Fatalf("run: %+v, %v", res, err)
	}
	tr, err := s.Transcript(r.ctx)
	if err != nil || len(tr) < 3 || tr[2].Role != turn.RoleTool || tr[2].Text != "2C snow" {
		t.Fatalf("transcript %+v, %v", tr, err)
	}
	rep, err := NewInspector(n.Streams()).VerifyRecorded(r.ctx, turn.Hooks{}, "s1", "")
	if err != nil || !rep.OK() || rep.Turns[0].Verdict != "ok" {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// A run that loses the race for a call's record takes the checkpoint's
// answer from the record that won, not from its own read: here a node
// fenced out while it stalls finds, after its call, an input the winner
// never saw. It follows the winner's turn to a commit that fails, with no
// nondeterminism on the way.
func TestLostRecordTakesWinnersCheckpoint(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(injectScript))
	var second *Node
	var secondRes []TurnResult
	first := r.node("first", onceAt("before-record tool call_1", func() {
		// The first node stalls before its call while the lease is freed
		// and the second node runs the whole turn.
		key, _ := leases.Key("sess", "s1")
		e, err := second.Streams().KVGet(context.Background(), key)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := second.Streams().KVDelete(context.Background(), key, e.Revision); err != nil {
			t.Error(err)
			return
		}
		if secondRes, err = second.Session("s1").Run(context.Background()); err != nil {
			t.Errorf("second node: %v", err)
		}
		if _, _, err := second.Session("s1").Send(context.Background(), "k2", Input{Text: "and tomorrow?"}); err != nil {
			t.Error(err)
		}
	}))
	second = r.node("second")
	s := first.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Run(r.ctx)
	var nd *effectlog.NondeterminismError
	if errors.As(err, &nd) || !errors.Is(err, sessionlog.ErrFenced) && !errors.Is(err, streams.ErrConflict) && !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the fenced-out node: %v", err)
	}
	if len(secondRes) != 1 || secondRes[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("second node: %+v", secondRes)
	}
	// Had the first node taken its own read, the model would have been
	// asked about the input at that checkpoint.
	for _, req := range r.models.Seen() {
		if req.Rule == "tomorrow" {
			t.Fatalf("the model was asked with the input injected: %s", req.Summary)
		}
	}
}

// Of two nodes racing for a session one runs it; a node fenced out while
// it runs cannot commit its late work.
func TestFencedOutNodeCannotCommit(t *testing.T) {
	r := newRig(t)
	var second *Node
	var secondRes []TurnResult
	first := r.node("first", withBoundary(func(name string) error {
		if name != "before-commit" || second == nil {
			return nil
		}
		// The first node stalls here (a long pause, say) while an operator
		// frees the lease and the second node runs the session.
		key, _ := leases.Key("sess", "s1")
		e, err := second.Streams().KVGet(context.Background(), key)
		if err != nil {
			return err
		}
		if _, err := second.Streams().KVDelete(context.Background(), key, e.Revision); err != nil {
			return err
		}
		res, err := second.Session("s1").Run(context.Background())
		secondRes = res
		if err != nil {
			t.Errorf("second node: %v", err)
		}
		return nil
	}))
	second = r.node("second")
	s := first.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Run(r.ctx)
	if !errors.Is(err, sessionlog.ErrFenced) && !errors.Is(err, streams.ErrConflict) && !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the fenced-out node's commit: %v", err)
	}
	if len(secondRes) != 1 {
		t.Fatalf("second node committed %d turns", len(secondRes))
	}
	// The log: fences with growing tokens, one commit, under the newest.
	var tokens []uint64
	commits := 0
	err = sessionlog.New(first.Streams()).Read(r.ctx, "s1", 0, func(_ uint64, e *sessionlog.Entry) error {
		if e.Kind == sessionlog.KindFence {
			if len(tokens) > 0 && e.Token <= tokens[len(tokens)-1] {
				t.Errorf("fence tokens do not grow: %v then %d", tokens, e.Token)
			}
			tokens = append(tokens, e.Token)
		} else {
			commits++
			if e.Token != tokens[len(tokens)-1] {
				t.Errorf("commit under token %d after fence %d", e.Token, tokens[len(tokens)-1])
			}
		}
		return nil
	})
	if err != nil || len(tokens) != 2 || commits != 1 {
		t.Fatalf("log: fences %v, commits %d, %v", tokens, commits, err)
	}
}

// A redeploy between the crash and the replay: the turn keeps the catalog
// it started with (a tool gone since fails as a tool error the model sees),
// and a changed system prompt is a clear nondeterminism error.
func TestReplayAcrossRedeploy(t *testing.T) {
	t.Run("tool-removed", func(t *testing.T) {
		r := newRig(t)
		crashAt(t, r, "after-record sync-tools")
		client, _ := openai.New(openai.Config{BaseURL: r.models.URL(), Model: "scripted"})
		second := r.node("second", WithModel(client), WithTools(tools.New()))
		res := runUntilFree(t, second.Session("s1"))
		if len(res) != 1 {
			t.Fatalf("%d turns", len(res))
		}
		failed := 0
		for _, m := range res[0].Outcome.Messages {
			if m.Role == turn.RoleTool && m.Error && strings.Contains(m.Text, "unknown tool") {
				failed++
			}
		}
		if failed != 3 {
			t.Fatalf("%d tool calls failed as unknown tools; want 3: %+v", failed, res[0].Outcome.Messages)
		}
	})
	t.Run("system-prompt-changed", func(t *testing.T) {
		// The node that began the turn is gone and no live node runs its
		// settings: the turn can never finish. It is committed as failed
		// once, by a run that fences once, and the model is not called.
		r := newRig(t)
		crashAt(t, r, "after-record llm-call")
		second := r.node("second", WithMachine(turn.Config{Model: "scripted", System: "You are a different agent."}))
		ctx, cancel := context.WithCancel(r.ctx)
		served := make(chan error, 1)
		go func() { served <- second.Serve(ctx) }()
		defer func() { cancel(); <-served }()
		var ts []TurnSummary
		testenv.WaitFor(t, 30*time.Second, func() error {
			if ts = turnsOf(t, second, "s1"); len(ts) != 1 {
				return fmt.Errorf("turns %+v", ts)
			}
			return nil
		})
		if tt := ts[0]; !tt.Failed || tt.Termination.Code != FailSettingsChanged || tt.Settings != second.SettingsFingerprint() {
			t.Fatalf("turn %+v", tt)
		}
		// A bounded look later: nothing more was fenced, committed or asked.
		time.Sleep(3 * time.Second)
		fences, commits := 0, 0
		_, _, err := second.log.ReadEntries(r.ctx, "s1", 0, func(_ uint64, e *sessionlog.Entry) error {
			switch e.Kind {
			case sessionlog.KindFence:
				fences++
			case sessionlog.KindCommit:
				commits++
			}
			return nil
		})
		if err != nil || fences != 2 || commits != 1 || r.models.Requests() != 1 {
			t.Fatalf("fences %d, commits %d, model requests %d, %v", fences, commits, r.models.Requests(), err)
		}
	})
	t.Run("left-to-a-matching-node", func(t *testing.T) {
		// A live node runs the settings the turn began under: the node with
		// other settings leaves it, fencing nothing, and that node finishes
		// it by replay without asking the model again.
		r := newRig(t)
		crashAt(t, r, "after-record llm-call")
		other := r.node("other", WithMachine(turn.Config{Model: "scripted", System: "You are a different agent."}))
		same := r.node("same")
		testenv.WaitFor(t, 20*time.Second, func() error {
			_, err := other.Session("s1").Run(r.ctx)
			if errors.Is(err, ErrBusy) {
				return err // the crashed node's lease runs out first
			}
			if !errors.Is(err, ErrSettingsMismatch) {
				t.Fatalf("a node with other settings, a matching node alive: %v", err)
			}
			return nil
		})
		res := runUntilFree(t, same.Session("s1"))
		if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd || res[0].Replayed == 0 {
			t.Fatalf("the matching node: %+v", res)
		}
		fences := 0
		_, _, _ = same.log.ReadEntries(r.ctx, "s1", 0, func(_ uint64, e *sessionlog.Entry) error {
			if e.Kind == sessionlog.KindFence {
				fences++
			}
			return nil
		})
		if fences != 2 || r.models.Requests() != 2 {
			t.Fatalf("fences %d (want the first node's and the matching node's), model requests %d", fences, r.models.Requests())
		}
	})
	t.Run("nondeterminism-is-terminal", func(t *testing.T) {
		// Same settings, other code (a hook the fingerprint cannot see):
		// the replay asks another request, and the turn is committed as
		// failed at once, naming the key and hashes, without a model call.
		r := newRig(t)
		crashAt(t, r, "after-record llm-call")
		hook := turn.Hooks{BeforeInference: func(turn.View) turn.HookAction {
			return turn.HookAction{Messages: []turn.Message{{Role: turn.RoleUser, Text: "be brief"}}}
		}}
		second := r.node("second", WithMachine(turn.Config{Model: "scripted", System: "You are a weather agent.", Hooks: hook}))
		res := runUntilFree(t, second.Session("s1"))
		if len(res) != 1 {
			t.Fatalf("%d turns", len(res))
		}
		term := res[0].Outcome.Termination
		if term.Reason != turn.Error || term.Code != FailNondeterminism || !strings.Contains(term.Detail, "lash:nondeterminism") ||
			!strings.Contains(term.Detail, "llm-call") || r.models.Requests() != 1 {
			t.Fatalf("termination %+v, model requests %d", term, r.models.Requests())
		}
	})
}

// Bad input gets a clear error and changes nothing; a malformed message on
// the input subject is consumed by a turn that says why, and no other
// session notices.
func TestBadInput(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	s := n.Session("bad")
	cases := map[string]Input{
		"empty":           {},
		"unknown call":    {Decisions: []Decision{{ID: "d1", CallID: "call_9", Action: "resume"}}},
		"unknown action":  {Decisions: []Decision{{ID: "d1", CallID: "call_9", Action: "maybe"}}},
		"oversized input": {Text: strings.Repeat("x", n.MaxInputBytes()+1)},
	}
	for name, in := range cases {
		if _, _, err := s.Send(r.ctx, name, in); !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: %v, want ErrBadInput", name, err)
		}
	}
	subj, _ := n.Streams().Subjects().SessionInputs("bad")
	if last, err := n.Streams().LastSeq(r.ctx, streams.Sessions); err != nil || last != 0 {
		t.Fatalf("refused inputs wrote something: last seq %d, %v", last, err)
	}
	// A program publishes garbage straight to the subject, and JSON with
	// more after it.
	var garbage []uint64
	for _, data := range []string{"{not json", `{"text":"hi"} xyz`} {
		seq, _, err := n.Streams().Publish(r.ctx, streams.Publication{Subject: subj, Data: []byte(data)})
		if err != nil {
			t.Fatal(err)
		}
		garbage = append(garbage, seq)
	}
	if _, _, err := n.Session("good").Send(r.ctx, "k", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 0 {
		t.Fatalf("malformed input started a turn: %+v, %v", res, err)
	}
	// Each is consumed without a turn, by an entry that says why.
	var refused []string
	_, _, err = n.log.ReadEntries(r.ctx, "bad", 0, func(_ uint64, e *sessionlog.Entry) error {
		if e.Kind == sessionlog.KindConsume {
			b, err := sessionlog.DecodeConsumeBody(e.Body)
			if err != nil {
				return err
			}
			for _, u := range b.Inputs {
				refused = append(refused, fmt.Sprintf("%d %s", u.Seq, u.Refused))
			}
		}
		return nil
	})
	if err != nil || len(refused) != 2 || !strings.HasPrefix(refused[0], fmt.Sprint(garbage[0])+" lash: bad input") ||
		!strings.Contains(refused[1], "more data after the input object") {
		t.Fatalf("refusals on the log: %q, %v", refused, err)
	}
	if st, err := s.load(r.ctx); err != nil || st.cursor != garbage[1] {
		t.Fatalf("cursor after the refusals: %+v, %v", st, err)
	}
	if good, err := n.Session("good").Run(r.ctx); err != nil || len(good) != 1 || good[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("the other session: %+v, %v", good, err)
	}
}

// An input that arrives after a turn's last checkpoint starts the next
// turn: it is neither lost nor injected into a turn that can no longer
// read it.
func TestInputAfterLastCheckpointStartsNextTurn(t *testing.T) {
	r := newRig(t)
	var other *Session
	n := r.node("a", onceAt("before-commit", func() {
		if _, _, err := other.Send(context.Background(), "k2", Input{Text: "Weather in Oslo?"}); err != nil {
			t.Error(err)
		}
	}))
	other = r.node("sender").Session("s1")
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 2 || res[1].Outcome.Messages[0].Text != "Weather in Oslo?" {
		t.Fatalf("turns %+v, %v", res, err)
	}
}

// A turn whose call a hook suspends is committed Waiting; a decision sent
// later resumes it in the next turn, which runs the call and answers.
func TestSuspendAndDecide(t *testing.T) {
	r := newRig(t)
	approve := turn.Hooks{BeforeTool: func(_ turn.View, c turn.ToolCall) turn.Gate {
		if strings.Contains(c.Arguments, "Pune") {
			return turn.Gate{Verdict: turn.Suspend, Ticket: turn.Ticket{Reason: "approve Pune"}}
		}
		return turn.Gate{}
	}}
	n := r.node("a", WithMachine(turn.Config{Model: "scripted", System: "You are a weather agent.", Hooks: approve}))
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 {
		t.Fatalf("first turn: %+v, %v", res, err)
	}
	// Oslo and Lima answered; the model went on and answered too; Pune waits.
	if out := res[0].Outcome; out.Status != turn.StatusWaiting || len(out.Suspended) != 1 || out.Suspended[0].Call.ID != "call_3" {
		t.Fatalf("first turn: status %s, suspended %+v", out.Status, out.Suspended)
	}
	if _, err := s.Decide(r.ctx, "d-bad", Decision{ID: "d0", CallID: "call_9", Action: "resume"}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("decision for an unknown call: %v", err)
	}
	if _, err := s.Decide(r.ctx, "d-1", Decision{ID: "d1", CallID: "call_3", Action: "resume", Mode: "replay"}); err != nil {
		t.Fatal(err)
	}
	res, err = s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Outcome.Status != turn.StatusDone || len(res[0].Outcome.Suspended) != 0 {
		t.Fatalf("resumed turn: %+v, %v", res, err)
	}
	if r.runs.runs["Pune"] != 1 {
		t.Fatalf("Pune ran %d times", r.runs.runs["Pune"])
	}
	tr, _ := s.Transcript(r.ctx)
	last := tr[len(tr)-1]
	if last.Role != turn.RoleAssistant {
		t.Fatalf("the resumed turn did not end with an answer: %+v", last)
	}
}

// crashAt runs a first node on "Weather?" until it dies at boundary: its
// connection drops and nothing after the boundary reaches the server.
func crashAt(t *testing.T, r *rig, boundary string) {
	t.Helper()
	conn := r.conn()
	first := r.nodeOn(conn, "first", withBoundary(func(name string) error {
		if name == boundary {
			conn.Close()
			return errCrash
		}
		return nil
	}))
	s := first.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(r.ctx); err == nil {
		t.Fatal("no crash")
	}
	first.Close(context.Background())
}

// onceAt runs do the first time the driver reaches boundary.
func onceAt(boundary string, do func()) Option {
	var once sync.Once
	return withBoundary(func(name string) error {
		if name == boundary {
			once.Do(do)
		}
		return nil
	})
}

// A stray message on a session's log (nothing lash wrote) does not stop
// the session from running.
func TestStrayLogMessage(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	subj, _ := n.Streams().Subjects().SessionEvents("s1")
	if _, _, err := n.Streams().Publish(r.ctx, streams.Publication{Subject: subj, Data: []byte("stray")}); err != nil {
		t.Fatal(err)
	}
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("run over a stray log message: %+v, %v", res, err)
	}
	if tr, err := s.Transcript(r.ctx); err != nil || len(tr) != 6 {
		t.Fatalf("transcript %d, %v", len(tr), err)
	}
}

// An unreadable input that comes while a turn runs is consumed by the
// turn's next checkpoint, whose journal record names it.
func TestBadInputAtCheckpoint(t *testing.T) {
	r := newRig(t)
	var n *Node
	var garbage uint64
	n = r.node("a", onceAt("before-record checkpoint", func() {
		var err error
		if garbage, _, err = n.log.AppendInput(r.ctx, "s1", "garbage", []byte("{not json")); err != nil {
			t.Error(err)
		}
	}))
	res, err := n.Session("s1").Turn("k1", Input{Text: "Weather?"}).Run(r.ctx)
	if err != nil || res.Outcome.Termination.Reason != turn.NaturalEnd || res.Cursor != garbage {
		t.Fatalf("turn %+v, %v", res, err)
	}
	js, err := NewInspector(n.Streams()).Journal(r.ctx, "s1", res.Turn)
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for _, j := range js {
		named = named || j.Kind == "checkpoint" && strings.Contains(j.Summary, fmt.Sprintf("refused input %d: lash: bad input", garbage))
	}
	if !named {
		t.Fatalf("no checkpoint names the refused input: %+v", js)
	}
}

// countLogs counts the records of a logger by message.
type countLogs struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countLogs) Enabled(context.Context, slog.Level) bool { return true }
func (c *countLogs) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[r.Message]++
	return nil
}
func (c *countLogs) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countLogs) WithGroup(string) slog.Handler      { return c }
func (c *countLogs) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[msg]
}

// Garbage published while a round of one call runs is refused at the
// checkpoint after it, whose answer rides in the call's record: the
// journal names the refusal, and the node warns once.
func TestRefusedAtCarriedCheckpoint(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(injectScript))
	logs := &countLogs{n: map[string]int{}}
	var n *Node
	n = r.node("a", WithLogger(slog.New(logs)), onceAt("before-record tool call_1", func() {
		subj, _ := n.Streams().Subjects().SessionInputs("s1")
		if _, _, err := n.Streams().Publish(context.Background(), streams.Publication{Subject: subj, Data: []byte("{not json")}); err != nil {
			t.Error(err)
		}
	}))
	s := n.Session("s1")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("run: %+v, %v", res, err)
	}
	js, err := NewInspector(n.Streams()).Journal(r.ctx, "s1", res[0].Turn)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range js {
		if j.Kind == "checkpoint" && j.In != "" && strings.Contains(j.Summary, "refused input") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no carried checkpoint names the refusal: %+v", js)
	}
	if c := logs.count("input refused at a checkpoint"); c != 1 {
		t.Fatalf("%d warnings, want 1", c)
	}
}
