package lash

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

// consumeEntries lists the inputs a session's consume entries took.
func consumeEntries(t *testing.T, n *Node, session string) []sessionlog.InputUse {
	t.Helper()
	var uses []sessionlog.InputUse
	_, _, err := n.log.ReadEntries(context.Background(), session, 0, func(_ uint64, e *sessionlog.Entry) error {
		if e.Kind == sessionlog.KindConsume {
			data, err := n.log.Body(context.Background(), session, e)
			if err != nil {
				return err
			}
			b, err := sessionlog.DecodeConsumeBody(data)
			if err != nil {
				return err
			}
			uses = append(uses, b.Inputs...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return uses
}

// A key consumed once is recognised for as long as the session's log
// lasts, not only within JetStream's dedupe window: sent again later with
// the same content it starts no turn; with other content it is refused,
// naming the key.
func TestInputKeysArePermanent(t *testing.T) {
	r := newRig(t)
	n := r.node("a", WithStreams(streams.Config{DuplicateWindow: time.Second}))
	s := n.Session("keys")
	if _, err := s.Turn("q1", Input{Text: "Weather?"}).Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	requests := r.models.Requests()
	// Within the window the same key with other content is refused at once.
	if _, _, err := s.Send(r.ctx, "q1", Input{Text: "Something else"}); !errors.Is(err, ErrKeyConflict) || !strings.Contains(err.Error(), `"q1"`) {
		t.Fatalf("other content under the same key, within the window: %v", err)
	}
	// A client retries after the window: JetStream takes it as new.
	var again uint64
	testenv.WaitFor(t, 20*time.Second, func() error {
		seq, dup, err := s.Send(r.ctx, "q1", Input{Text: "Weather?"})
		if err != nil {
			return err
		}
		if dup {
			return errors.New("still within the dedupe window")
		}
		again = seq
		return nil
	})
	res, err := s.Run(r.ctx)
	if err != nil || len(res) != 0 || r.models.Requests() != requests {
		t.Fatalf("a repeated key ran again: %+v, %v, model requests %d (were %d)", res, err, r.models.Requests(), requests)
	}
	uses := consumeEntries(t, n, "keys")
	if len(uses) != 1 || uses[0].Seq != again || uses[0].Duplicate == 0 || uses[0].Refused != "" {
		t.Fatalf("consumed %+v", uses)
	}
	// Other content under the key after the window (the retry above
	// opened a new one): refused when consumed.
	var other uint64
	testenv.WaitFor(t, 20*time.Second, func() error {
		var err error
		other, _, err = s.Send(r.ctx, "q1", Input{Text: "And Lima?"})
		return err
	})
	if res, err := s.Run(r.ctx); err != nil || len(res) != 0 {
		t.Fatalf("other content under a used key ran: %+v, %v", res, err)
	}
	uses = consumeEntries(t, n, "keys")
	if last := uses[len(uses)-1]; last.Seq != other || !strings.Contains(last.Refused, `idempotency key "q1" was used by input`) {
		t.Fatalf("consumed %+v", uses)
	}
	// A node with a projection refuses it before appending anything.
	withProj := r.node("b", WithStreams(streams.Config{DuplicateWindow: time.Second}), WithProjection(t.TempDir()))
	last, err := withProj.Streams().LastSeq(r.ctx, streams.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := withProj.Projection().WaitFor(r.ctx, last); err != nil {
		t.Fatal(err)
	}
	var kc *KeyConflictError
	if _, _, err := withProj.Session("keys").Send(r.ctx, "q1", Input{Text: "Yet another"}); !errors.As(err, &kc) || kc.Key != "q1" {
		t.Fatalf("a node with a projection: %v", err)
	}
	if seq, dup, err := withProj.Session("keys").Send(r.ctx, "q1", Input{Text: "Weather?"}); err != nil || !dup || seq == again {
		t.Fatalf("the same content again: seq %d, duplicate %v, %v", seq, dup, err)
	}
	if now, _ := withProj.Streams().LastSeq(r.ctx, streams.Sessions); now != last {
		t.Fatalf("refused and duplicate sends appended: last sequence %d, was %d", now, last)
	}
}

// Ids over the bound are refused before any subject is derived from them.
func TestLongIDsRefused(t *testing.T) {
	r := newRig(t)
	n := r.node("a")
	long := strings.Repeat("x", streams.MaxIDBytes+1)
	if _, _, err := n.Session(long).Send(r.ctx, "k", Input{Text: "hi"}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("a long session id: %v", err)
	}
	if _, _, err := n.Session("s").Send(r.ctx, long, Input{Text: "hi"}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("a long key: %v", err)
	}
	if _, err := n.Session(long).Run(r.ctx); !errors.Is(err, ErrBadInput) {
		t.Fatalf("running a long session id: %v", err)
	}
	if last, _ := n.Streams().LastSeq(r.ctx, streams.Sessions); last != 0 {
		t.Fatalf("something was appended: %d", last)
	}
	if _, err := Open(r.ctx, WithConn(r.conn()), WithModel(scripted.NewModel(scripted.MustParse(weatherScript))), WithNodeID(long)); err == nil {
		t.Fatal("a node id over the bound was accepted")
	}
}

// A message whose subject names no session (a token too long, or a
// non-canonical encoding of a plain id) is acknowledged and set aside by
// dispatch; nothing is derived from it, and the next good input runs.
func TestDispatchSetsAsideBadSubjects(t *testing.T) {
	r := newRig(t)
	n := r.node("a", WithProjection(t.TempDir()))
	var refused atomic.Int32
	n.opts.observer = func(ev Event) {
		if ev.Kind == EventInputRefused && ev.Session == "" {
			refused.Add(1)
		}
	}
	nc := r.conn()
	bad := []string{"lash.sess." + strings.Repeat("y", 2000) + ".in", "lash.sess.=aGk.in"}
	for _, subj := range bad {
		if _, err := nc.Request(subj, []byte(`{"text":"hi"}`), 5*time.Second); err != nil {
			t.Fatalf("%s...: %v", subj[:20], err)
		}
	}
	ctx, cancel := context.WithCancel(r.ctx)
	served := make(chan error, 1)
	go func() { served <- n.Serve(ctx) }()
	defer func() { cancel(); <-served }()
	if _, _, err := n.Session("hi").Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		if ts := turnsOf(t, n, "hi"); len(ts) != 1 {
			return fmt.Errorf("turns of hi: %+v", ts)
		}
		if refused.Load() != 2 {
			return fmt.Errorf("%d set aside", refused.Load())
		}
		return nil
	})
	last, _ := n.Streams().LastSeq(r.ctx, streams.Sessions)
	if err := n.Projection().WaitFor(r.ctx, last); err != nil {
		t.Fatal(err)
	}
	q, err := n.Projection().Quarantine()
	if err != nil || len(q) != 2 || !strings.Contains(q[0].Reason, "token of") || !strings.Contains(q[1].Reason, "canonical") {
		t.Fatalf("quarantine %+v, %v", q, err)
	}
	heads, err := n.Projection().Sessions()
	if err != nil || len(heads) != 1 || heads[0].Session != "hi" {
		t.Fatalf("sessions %+v, %v", heads, err)
	}
	// Nothing but the two messages names the bad tokens: no log entry, no
	// journal record, no lease.
	named := 0
	for _, filter := range []string{"lash.sess.>", "lash.fx.>"} {
		if err := n.Streams().Read(r.ctx, filter, 0, func(m *streams.Msg) error {
			if strings.Contains(m.Subject, "yyyy") || strings.Contains(m.Subject, "=aGk") {
				named++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	holders, err := n.leases.List(r.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range holders {
		if strings.Contains(h.Key, "yyyy") || strings.Contains(h.Key, "=aGk") {
			named++
		}
	}
	if named != 2 {
		t.Fatalf("%d messages and keys name the bad tokens, want the 2 inputs", named)
	}
}

// runAsync runs the session in the background.
func runAsync(t *testing.T, s *Session) <-chan []TurnResult {
	done := make(chan []TurnResult, 1)
	go func() {
		res, err := s.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	return done
}

// awaitRun waits for a run started by runAsync that a cancel should end.
func awaitRun(t *testing.T, done <-chan []TurnResult) []TurnResult {
	t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(30 * time.Second):
		t.Fatal("the turn did not end on the cancel")
		return nil
	}
}

// A cancel input stops a model call in flight: the partial answer is not
// recorded, the turn ends cancelled at once, and the model is asked once.
func TestCancelInterruptsModelCall(t *testing.T) {
	srv := testenv.RunJetStream(t)
	models := testenv.RunModelServer(t, scripted.MustParse("rule stuck\n  when user contains slow\n  hang\n\ndefault\n  say ok\n"))
	r := &rig{t: t, ctx: context.Background(), conn: func() *nats.Conn { return srv.Conn(t) }, replicas: 1, models: models, runs: &counter{runs: map[string]int{}}}
	n := r.node("a")
	s := n.Session("c")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "slow question"}); err != nil {
		t.Fatal(err)
	}
	done := runAsync(t, s)
	testenv.WaitFor(t, 20*time.Second, func() error {
		if models.Requests() == 0 {
			return errors.New("no model request yet")
		}
		return nil
	})
	cancelSeq, err := s.Cancel(r.ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	res := awaitRun(t, done)
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.Cancelled || res[0].Cursor != cancelSeq || models.Requests() != 1 {
		t.Fatalf("turns %+v, model requests %d", res, models.Requests())
	}
	js, err := NewInspector(n.Streams()).Journal(r.ctx, "c", res[0].Turn)
	if err != nil {
		t.Fatal(err)
	}
	var llm *JournalEntry
	for i := range js {
		if js[i].Kind == turn.KindLLMCall.String() {
			llm = &js[i]
		}
	}
	if llm == nil || !strings.HasPrefix(llm.Summary, "cancelled: cancelled by input") {
		t.Fatalf("journal %+v", js)
	}
}

// A cancel input stops a tool round in flight: the tools see their context
// end, and the turn ends cancelled without waiting for them.
func TestCancelInterruptsToolRound(t *testing.T) {
	r := newRig(t)
	var started, sawCancel atomic.Int32
	reg := tools.New()
	slow, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a weatherArgs) (string, error) {
		started.Add(1)
		<-ctx.Done()
		sawCancel.Add(1)
		return "", ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(slow); err != nil {
		t.Fatal(err)
	}
	n := r.node("a", WithTools(reg), WithToolTimeout(time.Hour))
	s := n.Session("t")
	if _, _, err := s.Send(r.ctx, "k1", Input{Text: "Weather?"}); err != nil {
		t.Fatal(err)
	}
	done := runAsync(t, s)
	testenv.WaitFor(t, 20*time.Second, func() error {
		if started.Load() != 3 {
			return fmt.Errorf("%d tools running", started.Load())
		}
		return nil
	})
	if _, err := s.Cancel(r.ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	res := awaitRun(t, done)
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.Cancelled || sawCancel.Load() != 3 {
		t.Fatalf("turns %+v, tools that saw the cancel: %d", res, sawCancel.Load())
	}
	// A replay of the cancelled round runs nothing again.
	rep, err := NewInspector(n.Streams()).VerifyRecorded(r.ctx, turn.Hooks{}, "t", "")
	if err != nil || !rep.OK() || rep.Turns[0].Verdict != "ok" {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// Large payloads go to the object store by reference: tool results of
// several MiB and a model answer of 2 MiB commit, and a node that replays
// the turn reads them back; an answer above the ceiling is recorded as a
// failed call once.
func TestLargePayloadsByReference(t *testing.T) {
	srv := testenv.RunJetStream(t)
	answer := strings.Repeat("a long answer. ", 2<<20/15)
	script := fmt.Sprintf("rule fetch\n  when tools = 0\n  call blob {\"n\":1}\n  call blob {\"n\":2}\n  call blob {\"n\":3}\n\nrule huge\n  when user contains huge\n  say %s%s\n\ndefault\n  say %s\n", answer, answer, answer)
	models := testenv.RunModelServer(t, scripted.MustParse(script))
	var runs atomic.Int32
	reg := tools.New()
	blob, err := tools.Func("blob", "a big result", func(ctx context.Context, a struct {
		N int `json:"n"`
	}) (string, error) {
		runs.Add(1)
		return strings.Repeat(fmt.Sprint(a.N), 1700<<10), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(blob); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ctx: context.Background(), conn: func() *nats.Conn { return srv.Conn(t) }, replicas: 1, models: models, runs: &counter{runs: map[string]int{}}}
	cfg := streams.Config{MaxPayloadBytes: 3 << 20}
	crashed := false
	conn := r.conn()
	// Not streamed: megabytes of answer in word-sized chunks take longer
	// than the model timeout under the race detector. And a long model
	// timeout: a timed-out read of a large answer is retried, which would
	// be a model request more than the test counts (or, past the retries,
	// a failed turn in place of the crash).
	slow, err := openai.New(openai.Config{BaseURL: models.URL(), Model: "scripted", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A lease of seconds: a run stops when a renewal is not answered
	// before its lease's expiry, which a 1 s lease's may not be while
	// megabytes move. The second node waits it out after the crash.
	first := r.nodeOn(conn, "first", WithTools(reg), WithStreams(cfg), WithStreaming(false), WithModel(slow), WithLeaseTTL(5*time.Second), withBoundary(func(name string) error {
		if name == "before-commit" && !crashed {
			crashed = true
			conn.Close()
			return errCrash
		}
		return nil
	}))
	if _, _, err := first.Session("big").Send(r.ctx, "k1", Input{Text: "fetch"}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Session("big").Run(r.ctx); !errors.Is(err, errCrash) {
		t.Fatalf("first node: %v; want its crash before the commit", err)
	}
	first.Close(context.Background())
	asked := models.Requests()
	// A long lease: the turns move MiBs, slowly under the race detector.
	second := r.node("second", WithTools(reg), WithStreams(cfg), WithLeaseTTL(10*time.Second), WithStreaming(false), WithModel(slow))
	res := runUntilFree(t, second.Session("big"))
	if len(res) != 1 || res[0].Executed != 0 || res[0].Outcome.Termination.Reason != turn.NaturalEnd || runs.Load() != 3 || models.Requests() != asked {
		t.Fatalf("replay: %+v; tool runs %d, model requests %d (were %d)", res, runs.Load(), models.Requests(), asked)
	}
	tr, err := second.Session("big").Transcript(r.ctx)
	if err != nil || len(tr) != 6 || tr[len(tr)-1].Text != strings.TrimSpace(answer) || len(tr[2].Text) != 1700<<10 {
		t.Fatalf("transcript: %d messages, %v", len(tr), err)
	}
	p := caughtUp(t, OpenProjection, second.Streams())
	if pt, err := p.Transcript("big", 0); err != nil || len(pt) != 6 || pt[5].Message.Text != tr[5].Text {
		t.Fatalf("projected transcript: %d, %v", len(pt), err)
	}
	// Over the ceiling: one model call, recorded as a failed call.
	asked = models.Requests()
	out, err := second.Session("big").Turn("k2", Input{Text: "huge"}).Run(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if term := out.Outcome.Termination; term.Reason != turn.Error || !strings.Contains(term.Detail, codeAnswerTooLarge) || models.Requests() != asked+1 {
		t.Fatalf("termination %+v, model requests %d (were %d)", term, models.Requests(), asked)
	}
}
