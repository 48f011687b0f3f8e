package turn

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// This file also holds the small driver helpers that replay_test.go,
// fuzz_test.go and bench_test.go share.

// testTools is the catalog the Go-driven tests offer.
var testTools = []ToolSpec{
	{Name: "read", Description: "reads a file", Schema: `{"type":"object"}`},
	{Name: "write", Description: "writes a file", Schema: `{"type":"object"}`},
	{Name: "deploy", Description: "deploys, after approval", Schema: `{"type":"object"}`},
}

// baseConfig is a plain config with a pure backoff.
func baseConfig() Config {
	return Config{
		Model:  "test-model",
		System: "You are a test agent.",
		Limits: Limits{Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * 250 * time.Millisecond }},
	}
}

// approvalConfig suspends every call to "deploy" at the BeforeTool gate and,
// with a positive wait, parks a waiting run on an AwaitEvent.
func approvalConfig(wait time.Duration) Config {
	cfg := baseConfig()
	cfg.DecisionWait = wait
	cfg.Hooks.BeforeTool = func(_ View, c ToolCall) Gate {
		if c.Name == "deploy" {
			return Gate{Verdict: Suspend, Ticket: Ticket{Reason: "approve deploy", Data: c.Arguments}}
		}
		return Gate{}
	}
	return cfg
}

func testStart() Start {
	return Start{Session: "s1", Turn: "t1", Input: Input{Messages: []Message{{Role: RoleUser, Text: "do the thing"}}}}
}

// drain takes every fire-and-forget effect queued before the outstanding
// effect (or Done) and returns them with it.
func drain(tb testing.TB, m *Machine) (queued []Effect, out Effect) {
	tb.Helper()
	for i := 0; ; i++ {
		e := m.Next()
		switch {
		case e == nil:
			tb.Fatalf("Next returned nil after %d fire-and-forget effects", i)
		case e.Head().ID != 0 || e.Kind() == KindDone:
			return queued, e
		case i > 100000:
			tb.Fatalf("Next yielded more than %d fire-and-forget effects in a row", i)
		}
		queued = append(queued, e)
	}
}

// outstanding drains the queue and returns the effect that waits for an answer.
func outstanding(tb testing.TB, m *Machine) Effect {
	tb.Helper()
	_, e := drain(tb, m)
	return e
}

// mustDeliver delivers r and checks the invariants afterwards.
func mustDeliver(tb testing.TB, m *Machine, r Result) {
	tb.Helper()
	if err := m.Deliver(r); err != nil {
		tb.Fatalf("Deliver(%T) for effect %d: %v", r, r.Answers(), err)
	}
	if err := m.st.check(); err != nil {
		tb.Fatalf("invariant broken after delivering %T: %v", r, err)
	}
}

func mustSnapshot(tb testing.TB, m *Machine) []byte {
	tb.Helper()
	b, err := m.Snapshot()
	if err != nil {
		tb.Fatalf("Snapshot: %v", err)
	}
	return b
}

// effectSig is a canonical, pointer-free description of an effect: kind,
// head (id, key, hash) and the fields a driver acts on. Two effects with the
// same signature ask for the same thing.
func effectSig(e Effect) string {
	var b strings.Builder
	h := e.Head()
	fmt.Fprintf(&b, "%s id=%d key=%s hash=%s", e.Kind(), h.ID, h.Key, h.Hash)
	switch e := e.(type) {
	case *LLMCall:
		fmt.Fprintf(&b, " attempt=%d messages=%d tools=%d", e.Attempt, len(e.Request.Messages), len(e.Request.Tools))
	case *ToolCalls:
		for _, c := range e.Calls {
			fmt.Fprintf(&b, "\n  call %s %s %s key=%s hash=%s", c.Call.ID, c.Call.Name, c.Call.Arguments, c.Key, c.Hash)
			if c.Decision != nil {
				fmt.Fprintf(&b, " decision=%+v", *c.Decision)
			}
		}
	case *Checkpoint:
		fmt.Fprintf(&b, " at=%s", e.At)
	case *Sleep:
		fmt.Fprintf(&b, " duration=%s reason=%q", e.Duration, e.Reason)
	case *AwaitEvent:
		fmt.Fprintf(&b, " name=%q timeout=%s", e.Name, e.Timeout)
	case *Progress:
		fmt.Fprintf(&b, " messages=%+v events=%+v", e.Messages, e.Events)
	case *Emit:
		fmt.Fprintf(&b, " event=%+v", e.Event)
	case *Done:
		fmt.Fprintf(&b, " outcome=%+v", e.Outcome)
	}
	return b.String()
}

// answer builds the result for the outstanding effect e.
type answer func(e Effect) Result

func syncTools(tools ...ToolSpec) answer {
	return func(e Effect) Result { return ToolsSynced{ID: e.Head().ID, Tools: tools} }
}

func replyText(text string) answer {
	return func(e Effect) Result {
		return LLMResult{ID: e.Head().ID, Response: &ModelResponse{Text: text, Finish: FinishStop, Usage: Usage{InputTokens: 10, OutputTokens: 2}}}
	}
}

func replyCalls(calls ...ToolCall) answer {
	return func(e Effect) Result {
		return LLMResult{ID: e.Head().ID, Response: &ModelResponse{ToolCalls: calls, Finish: FinishToolCalls, Usage: Usage{InputTokens: 10, OutputTokens: 5}}}
	}
}

func replyError(retryable bool) answer {
	return func(e Effect) Result {
		return LLMResult{ID: e.Head().ID, Err: &CallError{Retryable: retryable, Code: "rate_limited", Message: "slow down"}}
	}
}

func toolResults(rs ...ToolResult) answer {
	return func(e Effect) Result { return ToolResults{ID: e.Head().ID, Results: rs} }
}

func checkpointWith(msgs []Message, decs ...Decision) answer {
	return func(e Effect) Result { return CheckpointResult{ID: e.Head().ID, Messages: msgs, Decisions: decs} }
}

func eventWith(decs ...Decision) answer {
	return func(e Effect) Result { return EventResult{ID: e.Head().ID, Decisions: decs} }
}

func sleepDone() answer { return func(e Effect) Result { return SleepDone{ID: e.Head().ID} } }

func cancelTurn() answer {
	return func(e Effect) Result { return Cancel{ID: e.Head().ID, Reason: "user pressed stop"} }
}

func call(id, name string) ToolCall {
	return ToolCall{ID: id, Name: name, Arguments: `{"arg":"` + id + `"}`}
}

func ok(id, out string) ToolResult { return ToolResult{CallID: id, Status: ToolOK, Output: out} }

// waitingState is one state a machine can wait in, reached by answering the
// outstanding effect with each step in turn.
type waitingState struct {
	name  string
	cfg   Config
	steps []answer
	want  Kind
	at    CheckpointKind // for checkpoints
	// calls lists the ids of the outstanding ToolCalls batch.
	calls []string
}

func waitingStates() []waitingState {
	base, await, park := baseConfig(), approvalConfig(time.Minute), approvalConfig(0)
	tools := syncTools(testTools...)
	twoCalls := replyCalls(call("c1", "read"), call("c2", "write"))
	approve := Decision{ID: "d1", CallID: "c3", Action: Resume, Mode: ResumePassToTool, Payload: "approved by alice"}
	return []waitingState{
		{name: "sync-tools", cfg: base, want: KindSyncTools},
		{name: "llm-call", cfg: base, steps: []answer{tools}, want: KindLLMCall},
		{name: "sleep after retryable error", cfg: base, steps: []answer{tools, replyError(true)}, want: KindSleep},
		{name: "llm-call retry attempt", cfg: base, steps: []answer{tools, replyError(true), sleepDone()}, want: KindLLMCall},
		{name: "tool-calls", cfg: base, steps: []answer{tools, twoCalls}, want: KindToolCalls, calls: []string{"c1", "c2"}},
		{name: "tool-calls after partial results", cfg: base, want: KindToolCalls, calls: []string{"c1", "c2"},
			steps: []answer{tools, twoCalls, toolResults(ok("c2", "written"))}},
		{name: "tool-calls after a pending result", cfg: base, want: KindToolCalls, calls: []string{"c1", "c2"},
			steps: []answer{tools, twoCalls, toolResults(ToolResult{CallID: "c1", Status: ToolPending, Output: "needs a password"})}},
		{name: "checkpoint after-tools", cfg: base, want: KindCheckpoint, at: AfterTools,
			steps: []answer{tools, twoCalls, toolResults(ok("c2", "written")), toolResults(ok("c1", "read"))}},
		{name: "checkpoint before-finish", cfg: base, want: KindCheckpoint, at: BeforeFinish,
			steps: []answer{tools, replyText("all done")}},
		{name: "await-event", cfg: await, want: KindAwaitEvent,
			steps: []answer{tools, replyCalls(call("c3", "deploy")), checkpointWith(nil)}},
		{name: "tool-calls resumed by a decision", cfg: await, want: KindToolCalls, calls: []string{"c3"},
			steps: []answer{tools, replyCalls(call("c3", "deploy")), checkpointWith(nil), eventWith(approve)}},
		{name: "done natural end", cfg: base, want: KindDone,
			steps: []answer{tools, replyText("all done"), checkpointWith(nil)}},
		{name: "done suspended", cfg: park, want: KindDone,
			steps: []answer{tools, replyCalls(call("c3", "deploy"), call("c4", "read")), toolResults(ok("c4", "read")),
				checkpointWith(nil), replyText("waiting for approval"), checkpointWith(nil)}},
		{name: "done cancelled mid-batch", cfg: base, want: KindDone,
			steps: []answer{tools, twoCalls, toolResults(ok("c1", "read")), cancelTurn()}},
	}
}

// reach builds the machine for ws and answers each step. It leaves the
// fire-and-forget effects of the last step queued.
func (ws waitingState) reach(tb testing.TB) *Machine {
	tb.Helper()
	m, err := New(ws.cfg, testStart())
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	for i, step := range ws.steps {
		e := outstanding(tb, m)
		if e.Kind() == KindDone {
			tb.Fatalf("%s: turn ended before step %d", ws.name, i+1)
		}
		mustDeliver(tb, m, step(e))
	}
	return m
}

func TestSnapshotEveryWaitingState(t *testing.T) {
	for _, ws := range waitingStates() {
		t.Run(ws.name, func(t *testing.T) {
			m := ws.reach(t)

			// Snapshot while the last step's Progress is still queued: the
			// queue is state too.
			snap := mustSnapshot(t, m)
			r, err := Restore(ws.cfg, snap)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if again := mustSnapshot(t, r); !bytes.Equal(snap, again) {
				t.Fatalf("snapshot of the restored machine differs from the one it was restored from (%d vs %d bytes)", len(again), len(snap))
			}
			if err := r.st.check(); err != nil {
				t.Fatalf("restored machine breaks an invariant: %v", err)
			}

			qm, em := drain(t, m)
			qr, er := drain(t, r)
			if len(qm) != len(qr) {
				t.Fatalf("original queued %d fire-and-forget effects, restored %d", len(qm), len(qr))
			}
			for i := range qm {
				if a, b := effectSig(qm[i]), effectSig(qr[i]); a != b {
					t.Errorf("queued effect %d differs:\noriginal %s\nrestored %s", i, a, b)
				}
			}

			if em.Kind() != ws.want {
				t.Fatalf("waiting on %s, want %s", em.Kind(), ws.want)
			}
			assertSameEffect(t, em, er)
			switch e := em.(type) {
			case *Checkpoint:
				if e.At != ws.at {
					t.Errorf("checkpoint %s, want %s", e.At, ws.at)
				}
			case *ToolCalls:
				var ids []string
				for _, c := range e.Calls {
					ids = append(ids, c.Call.ID)
				}
				if got, want := strings.Join(ids, ","), strings.Join(ws.calls, ","); got != want {
					t.Errorf("batch calls %s, want %s", got, want)
				}
			case *Done:
				if ws.name == "done suspended" && (e.Outcome.Status != StatusWaiting || len(e.Outcome.Suspended) != 1) {
					t.Errorf("suspended turn ended with %s and %d suspended calls", e.Outcome.Status, len(e.Outcome.Suspended))
				}
			}

			// Both drained the same queue; their states must still agree.
			if a, b := mustSnapshot(t, m), mustSnapshot(t, r); !bytes.Equal(a, b) {
				t.Errorf("after draining, original and restored snapshots differ")
			}
			// Next yields the outstanding effect again, unchanged.
			if again := r.Next(); effectSig(again) != effectSig(er) {
				t.Errorf("outstanding effect changed on a second Next:\n%s\n%s", effectSig(er), effectSig(again))
			}
		})
	}
}

// assertSameEffect demands the same kind, id, key and hash, and for a tool
// batch the same calls with the same keys and hashes.
func assertSameEffect(tb testing.TB, want, got Effect) {
	tb.Helper()
	if want.Kind() != got.Kind() {
		tb.Fatalf("effect kind: got %s, want %s", got.Kind(), want.Kind())
	}
	wh, gh := want.Head(), got.Head()
	if gh.ID != wh.ID {
		tb.Errorf("effect id: got %d, want %d", gh.ID, wh.ID)
	}
	if gh.Key != wh.Key {
		tb.Errorf("replay key: got %s, want %s", gh.Key, wh.Key)
	}
	if gh.Hash != wh.Hash {
		tb.Errorf("hash: got %s, want %s", gh.Hash, wh.Hash)
	}
	if w, ok := want.(*ToolCalls); ok {
		g := got.(*ToolCalls)
		if len(g.Calls) != len(w.Calls) {
			tb.Fatalf("batch has %d calls, want %d", len(g.Calls), len(w.Calls))
		}
		for i := range w.Calls {
			if g.Calls[i].Key != w.Calls[i].Key || g.Calls[i].Hash != w.Calls[i].Hash {
				tb.Errorf("call %d: got key %s hash %s, want key %s hash %s",
					i, g.Calls[i].Key, g.Calls[i].Hash.Short(), w.Calls[i].Key, w.Calls[i].Hash.Short())
			}
		}
	}
	if a, b := effectSig(want), effectSig(got); a != b {
		tb.Errorf("effects differ:\nwant %s\ngot  %s", a, b)
	}
}

// restoreSafely runs Restore and turns a panic into an error the test reports.
func restoreSafely(cfg Config, b []byte) (m *Machine, panicked any, err error) {
	defer func() { panicked = recover() }()
	m, err = Restore(cfg, b)
	return m, nil, err
}

// encodeState writes st with a valid header, as Snapshot would.
func encodeState(tb testing.TB, st *state) []byte {
	tb.Helper()
	var buf bytes.Buffer
	buf.WriteString(snapshotMagic)
	buf.WriteByte(SnapshotVersion)
	if err := msgpack.NewEncoder(&buf).Encode(st); err != nil {
		tb.Fatalf("encoding state: %v", err)
	}
	return buf.Bytes()
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	cfg := approvalConfig(time.Minute)
	header := []byte(snapshotMagic + string(rune(SnapshotVersion)))
	valid := map[string][]byte{}
	var validNames []string
	for _, ws := range waitingStates() {
		valid[ws.name] = mustSnapshot(t, ws.reach(t))
		validNames = append(validNames, ws.name)
	}
	tools := valid["tool-calls"]

	type badCase struct {
		name string
		b    []byte
		want error
	}
	var cases []badCase
	add := func(want error, name string, b []byte) { cases = append(cases, badCase{name, b, want}) }

	add(ErrSnapshot, "nil", nil)
	add(ErrSnapshot, "empty", []byte{})
	add(ErrSnapshot, "magic only", []byte(snapshotMagic))
	add(ErrSnapshot, "header only", header)
	add(ErrSnapshot, "never-used msgpack byte", append(header, 0xc1))
	add(ErrSnapshot, "nil body", append(header, 0xc0))
	add(ErrSnapshot, "string body", append(header, 0xa3, 'a', 'b', 'c'))
	add(ErrSnapshot, "array body", append(header, 0x92, 0x01, 0x02))
	add(ErrSnapshot, "empty map body", append(header, 0x80))
	add(ErrSnapshot, "forged 4G-element array", append(header, 0xdd, 0xff, 0xff, 0xff, 0xff))
	add(ErrSnapshot, "forged 4G-element map", append(header, 0xdf, 0xff, 0xff, 0xff, 0xff))
	add(ErrSnapshot, "forged 4GB string", append(header, 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'))
	add(ErrSnapshot, "trailing byte", append(bytes.Clone(tools), 0x00))
	add(ErrSnapshot, "two snapshots", append(bytes.Clone(tools), tools[len(header):]...))
	add(ErrSnapshot, "unknown field", append(header, 0x81, 0xa3, 'z', 'z', 'z', 0x01))
	add(ErrSnapshot, "field of the wrong type", append(header, 0x81, 0xa2, 'p', 'h', 0xa1, 'x'))
	add(ErrSnapshot, "text", []byte("this is not a snapshot at all"))

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 64 {
		junk := make([]byte, 1+rng.IntN(256))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		add(ErrSnapshot, fmt.Sprintf("random body %d", i), append(bytes.Clone(header), junk...))
		add(ErrSnapshot, fmt.Sprintf("random bytes %d", i), junk)
	}

	for i := range len(snapshotMagic) {
		b := bytes.Clone(tools)
		b[i] ^= 0x20
		add(ErrSnapshot, fmt.Sprintf("magic byte %d changed", i), b)
	}
	for _, v := range []byte{SnapshotVersion + 1, SnapshotVersion + 2, 0x7f, 0xff} {
		b := bytes.Clone(tools)
		b[len(snapshotMagic)] = v
		add(ErrSnapshotVersion, fmt.Sprintf("future version %d", v), b)
	}

	for _, name := range validNames {
		b := valid[name]
		for n := range len(b) {
			add(ErrSnapshot, fmt.Sprintf("%s truncated to %d of %d bytes", name, n, len(b)), b[:n])
		}
	}

	// Well-formed msgpack that breaks an invariant.
	var m *Machine
	for _, ws := range waitingStates() {
		if ws.name == "tool-calls" {
			m = ws.reach(t)
		}
	}
	broken := []struct {
		name  string
		spoil func(st *state)
	}{
		{"no session", func(st *state) { st.Session = "" }},
		{"unknown phase", func(st *state) { st.Phase = 99 }},
		{"zero phase", func(st *state) { st.Phase = 0 }},
		{"unknown status", func(st *state) { st.Status = 9 }},
		{"outstanding id not below next id", func(st *state) { st.Out = st.NextID }},
		{"zero next id", func(st *state) { st.NextID = 0 }},
		{"history longer than messages", func(st *state) { st.HistoryLen = len(st.Messages) + 1 }},
		{"progress cursor beyond the log", func(st *state) { st.SentMsgs = len(st.Messages) + 1 }},
		{"negative iteration", func(st *state) { st.Iteration = -1 }},
		{"message with no role", func(st *state) { st.Messages[0].Role = 0 }},
		{"queued done effect", func(st *state) { st.Queue = append(st.Queue, queued{Kind: KindDone}) }},
		{"repeated call id", func(st *state) { st.Calls[1].Call.ID = st.Calls[0].Call.ID }},
		{"empty call id", func(st *state) { st.Calls[0].Call.ID = "" }},
		{"call in a future round", func(st *state) { st.Calls[0].Round = st.Round + 1 }},
		{"batch with no calls", func(st *state) {
			for i := range st.Calls {
				st.Calls[i].Exec = false
			}
		}},
		{"malformed call result", func(st *state) { st.Calls[0].Result = &ToolResult{CallID: "other", Status: ToolOK} }},
		{"model call without request", func(st *state) { st.Phase, st.Request = phaseLLM, nil }},
		{"sleep without request", func(st *state) { st.Phase, st.Request, st.Attempt = phaseSleep, nil, 1 }},
		{"unknown checkpoint kind", func(st *state) {
			st.Phase, st.At = phaseCheckpoint, 7
			for i := range st.Calls {
				st.Calls[i].Exec = false
			}
		}},
		{"await without timeout", func(st *state) {
			st.Phase, st.AwaitFor = phaseAwait, 0
			for i := range st.Calls {
				st.Calls[i].Exec = false
			}
		}},
		{"done without reason", func(st *state) {
			st.Phase, st.Term = phaseDone, Termination{}
			for i := range st.Calls {
				st.Calls[i].Exec = false
			}
		}},
		{"running calls outside a batch", func(st *state) { st.Phase, st.At = phaseCheckpoint, AfterTools }},
	}
	for _, bc := range broken {
		b, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		r, err := Restore(cfg, b)
		if err != nil {
			t.Fatal(err)
		}
		st := r.st
		st.Calls = append([]callState(nil), r.st.Calls...)
		st.Messages = append([]Message(nil), r.st.Messages...)
		bc.spoil(&st)
		add(ErrSnapshot, "invariant: "+bc.name, encodeState(t, &st))
	}

	for _, tc := range cases {
		m, panicked, err := restoreSafely(cfg, tc.b)
		switch {
		case panicked != nil:
			t.Errorf("%s: Restore panicked: %v", tc.name, panicked)
		case err == nil:
			t.Errorf("%s: Restore accepted %d bad bytes (phase %d)", tc.name, len(tc.b), m.st.Phase)
		case !errors.Is(err, tc.want):
			t.Errorf("%s: Restore error %q does not wrap %q", tc.name, err, tc.want)
		}
	}

	if _, err := Restore(Config{Limits: Limits{MaxIterations: -1}}, tools); !errors.Is(err, ErrInvalidStart) {
		t.Errorf("Restore with an invalid config: got %v, want ErrInvalidStart", err)
	}
}

// A snapshot whose request holds fewer messages than the conversation, or
// whose history digest does not match its history, is refused, never
// hashed into a panic or a hash that covers other messages.
func TestRestoreRefusesInconsistentRequest(t *testing.T) {
	m, err := New(Config{Model: "m", System: "be brief"}, Start{Session: "s", Turn: "t",
		History: []Message{{Role: RoleUser, Text: "one"}, {Role: RoleAssistant, Text: "two"}},
		Input:   Input{Messages: []Message{{Role: RoleUser, Text: "three"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		e := m.Next()
		if s, ok := e.(*SyncTools); ok {
			if err := m.Deliver(ToolsSynced{ID: s.H.ID}); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok := e.(*LLMCall); ok {
			break
		}
	}
	for name, spoil := range map[string]func(st *state){
		"short request":  func(st *state) { st.Request.Messages = st.Request.Messages[:0] },
		"foreign digest": func(st *state) { st.HistoryDigest = Digest{}.Extend(Message{Role: RoleUser, Text: "other"}) },
	} {
		c := *m
		st := c.st
		req := *st.Request
		st.Request = &req
		spoil(&st)
		c.st = st
		b, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(Config{Model: "m", System: "be brief"}, b); !errors.Is(err, ErrSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrSnapshot", name, err)
		}
	}
}
