package turn

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// journalEntry is one answer as a journal records it: the head of the effect
// it answered and the result fed back. A ToolCalls batch answered one result
// at a time has several entries with the same head.
type journalEntry struct {
	Head   Head
	Result Result
}

// recording is everything a live run leaves behind.
type recording struct {
	effects []string // effectSig of every effect Next returned, in order
	journal []journalEntry
	// snaps[i] is the snapshot taken right after journal[i] was delivered;
	// seen[i] is how many effects Next had returned by then.
	snaps   [][]byte
	seen    []int
	outcome Outcome
	final   []byte
}

// scriptedModel is a deterministic model: its answer is a function of the
// iteration and attempt of the request alone.
//
//	iteration 1, attempt 1: a retryable rate-limit error (the turn sleeps)
//	iteration 1, attempt 2: two parallel reads, one of a missing file
//	iteration 2:            a grep and a deploy (the hook suspends the deploy)
//	iteration 3:            the final answer
func scriptedModel(e *LLMCall) LLMResult {
	id := e.H.ID
	usage := Usage{InputTokens: int64(20 * len(e.Request.Messages)), OutputTokens: 7}
	switch it := e.H.Key.Iteration; {
	case it == 1 && e.Attempt == 1:
		return LLMResult{ID: id, Err: &CallError{Retryable: true, Code: "rate_limited", Message: "429 too many requests"}}
	case it == 1:
		return LLMResult{ID: id, Response: &ModelResponse{Text: "Reading both files.", Finish: FinishToolCalls, Usage: usage,
			ToolCalls: []ToolCall{
				{ID: "c1", Name: "read", Arguments: `{"path":"a.txt"}`},
				{ID: "c2", Name: "read", Arguments: `{"path":"missing.txt"}`},
			}}}
	case it == 2:
		return LLMResult{ID: id, Response: &ModelResponse{Finish: FinishToolCalls, Usage: usage,
			ToolCalls: []ToolCall{
				{ID: "c3", Name: "grep", Arguments: `{"pattern":"TODO"}`},
				{ID: "c4", Name: "deploy", Arguments: `{"env":"prod"}`},
			}}}
	default:
		return LLMResult{ID: id, Response: &ModelResponse{Text: "Read a.txt, b.txt is missing, deployed to prod.", Finish: FinishStop, Usage: usage}}
	}
}

// scriptedTool runs one call: a deterministic function of the call and its
// decision.
func scriptedTool(c PendingCall) ToolResult {
	switch {
	case strings.Contains(c.Call.Arguments, "missing"):
		return ToolResult{CallID: c.Call.ID, Status: ToolError, Output: "open missing.txt: no such file"}
	case c.Decision != nil:
		return ToolResult{CallID: c.Call.ID, Status: ToolOK, Output: c.Call.Name + " done (" + c.Decision.Payload + ")"}
	}
	return ToolResult{CallID: c.Call.ID, Status: ToolOK, Output: c.Call.Name + " " + c.Call.Arguments + ": ok"}
}

// liveDriver answers effects the way a worker would, with the scripted model
// and tools and the input that "arrives" at each checkpoint.
type liveDriver struct{ checkpoints int }

func (d *liveDriver) answer(tb testing.TB, e Effect) []Result {
	id := e.Head().ID
	switch e := e.(type) {
	case *SyncTools:
		return []Result{ToolsSynced{ID: id, Tools: append(slices.Clone(testTools), ToolSpec{Name: "grep", Description: "searches"})}}
	case *LLMCall:
		return []Result{scriptedModel(e)}
	case *Sleep:
		return []Result{SleepDone{ID: id}}
	case *ToolCalls:
		// The calls run in parallel and finish in reverse order; each
		// result is delivered (and journaled) as it arrives.
		var rs []Result
		for _, c := range slices.Backward(e.Calls) {
			rs = append(rs, ToolResults{ID: id, Results: []ToolResult{scriptedTool(c)}})
		}
		return rs
	case *Checkpoint:
		d.checkpoints++
		r := CheckpointResult{ID: id}
		switch d.checkpoints {
		case 1: // the user typed while the reads ran
			r.Messages = []Message{{Role: RoleUser, Text: "Also deploy to prod when you are done."}}
		case 2: // the approval came in during the grep
			r.Decisions = []Decision{{ID: "approval-1", CallID: "c4", Action: Resume, Mode: ResumePassToTool, Payload: "approved by alice"}}
		}
		return []Result{r}
	case *AwaitEvent:
		return []Result{EventResult{ID: id, TimedOut: true}}
	}
	tb.Fatalf("no answer for %s", effectSig(e))
	return nil
}

func replayConfig() Config {
	cfg := approvalConfig(0)
	cfg.Model = "replay-model"
	cfg.System = "You are a careful agent."
	cfg.Limits.MaxAttempts = 3
	cfg.Hooks.AfterInference = func(_ View, r ModelResponse) HookAction {
		return HookAction{Emit: []Event{{Type: "usage", Detail: fmt.Sprintf("%d tokens", r.Usage.Total())}}}
	}
	return cfg
}

func replayStart() Start {
	return Start{Session: "sess-42", Turn: "turn-7",
		History: []Message{{Role: RoleUser, Text: "hi"}, {Role: RoleAssistant, Text: "Hello."}},
		Input:   Input{Messages: []Message{{Role: RoleUser, Text: "Check a.txt and missing.txt."}}}}
}

// runLive drives a whole turn with the live driver and records it.
func runLive(tb testing.TB, cfg Config, start Start) recording {
	tb.Helper()
	m, err := New(cfg, start)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	var rec recording
	d := &liveDriver{}
	// pending holds the answers of the outstanding effect not delivered
	// yet: the results of a batch arrive one at a time, with a Next after
	// each, as in any drive loop.
	var pending []Result
	var pendingFor EffectID
	for range 1000 {
		e := m.Next()
		rec.effects = append(rec.effects, effectSig(e))
		if done, ok := e.(*Done); ok {
			rec.outcome = done.Outcome
			rec.final = mustSnapshot(tb, m)
			return rec
		}
		if e.Head().ID == 0 {
			continue
		}
		if e.Head().ID != pendingFor || len(pending) == 0 {
			pending, pendingFor = d.answer(tb, e), e.Head().ID
		}
		r := pending[0]
		pending = pending[1:]
		mustDeliver(tb, m, r)
		rec.journal = append(rec.journal, journalEntry{Head: e.Head(), Result: r})
		rec.snaps = append(rec.snaps, mustSnapshot(tb, m))
		rec.seen = append(rec.seen, len(rec.effects))
	}
	tb.Fatalf("the live turn did not finish in 1000 effects")
	return rec
}

// errNondeterminism is what a journal reports when a replayed effect is not
// the one it recorded under that id.
var errNondeterminism = errors.New("nondeterminism")

// replayer answers effects from a journal alone, as a worker that took the
// turn over after a crash would: by effect id, checking key and hash first.
type replayer struct {
	heads   map[EffectID]Head
	answers map[EffectID][]Result
	// used counts the answers already fed for each effect.
	used map[EffectID]int
}

func newReplayer(journal []journalEntry) *replayer {
	r := &replayer{heads: map[EffectID]Head{}, answers: map[EffectID][]Result{}, used: map[EffectID]int{}}
	for _, j := range journal {
		r.heads[j.Head.ID] = j.Head
		r.answers[j.Head.ID] = append(r.answers[j.Head.ID], j.Result)
	}
	return r
}

// lookup returns the next recorded answer for e, or a nondeterminism error if
// e is not what the journal recorded under its id.
func (r *replayer) lookup(e Effect) (Result, error) {
	h := e.Head()
	rec, ok := r.heads[h.ID]
	switch {
	case !ok:
		return nil, fmt.Errorf("effect %d (%s) is not in the journal", h.ID, h.Key)
	case rec.Key != h.Key:
		return nil, fmt.Errorf("%w: effect %d: key %s, journal has %s", errNondeterminism, h.ID, h.Key, rec.Key)
	case rec.Hash != h.Hash:
		return nil, fmt.Errorf("%w: effect %d (%s): request hash %s, journal has %s", errNondeterminism, h.ID, h.Key, h.Hash.Short(), rec.Hash.Short())
	case r.used[h.ID] >= len(r.answers[h.ID]):
		return nil, fmt.Errorf("effect %d (%s) is still outstanding after all %d journaled answers", h.ID, h.Key, r.used[h.ID])
	}
	r.used[h.ID]++
	return r.answers[h.ID][r.used[h.ID]-1], nil
}

// replay drives m to the end from the journal and returns the effects it saw.
func (r *replayer) replay(tb testing.TB, m *Machine) ([]string, *Done, error) {
	tb.Helper()
	var effects []string
	for range 1000 {
		e := m.Next()
		effects = append(effects, effectSig(e))
		if done, ok := e.(*Done); ok {
			return effects, done, nil
		}
		if e.Head().ID == 0 {
			continue
		}
		res, err := r.lookup(e)
		if err != nil {
			return effects, nil, err
		}
		if err := m.Deliver(res); err != nil {
			return effects, nil, fmt.Errorf("delivering the journaled %T for effect %d: %w", res, e.Head().ID, err)
		}
		if err := m.st.check(); err != nil {
			tb.Fatalf("invariant broken in replay after effect %d: %v", e.Head().ID, err)
		}
	}
	tb.Fatalf("the replayed turn did not finish in 1000 effects")
	return nil, nil, nil
}

func TestReplayIsDeterministic(t *testing.T) {
	cfg, start := replayConfig(), replayStart()
	live := runLive(t, cfg, start)

	// The script must actually have exercised what this test is about.
	var kinds []string
	for _, s := range live.effects {
		kinds = append(kinds, strings.Fields(s)[0])
	}
	for _, want := range []string{"sleep", "tool-calls", "checkpoint", "emit", "progress", "done"} {
		if !slices.Contains(kinds, want) {
			t.Fatalf("the live run yielded no %s effect: %v", want, kinds)
		}
	}
	if o := live.outcome; o.Termination.Reason != NaturalEnd || o.Iterations != 3 {
		t.Fatalf("live run ended %s after %d iterations, want natural-end after 3", o.Termination, o.Iterations)
	}
	if !slices.ContainsFunc(live.outcome.Messages, func(m Message) bool { return m.Role == RoleTool && m.Error }) {
		t.Fatalf("live run has no failed tool call")
	}
	if !slices.ContainsFunc(live.outcome.Messages, func(m Message) bool { return strings.Contains(m.Text, "approved by alice") }) {
		t.Fatalf("live run did not run the resumed deploy")
	}

	t.Run("from the start", func(t *testing.T) {
		m, err := New(cfg, start)
		if err != nil {
			t.Fatal(err)
		}
		effects, done, err := newReplayer(live.journal).replay(t, m)
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		assertSameRun(t, live.effects, effects)
		if !reflect.DeepEqual(done.Outcome, live.outcome) {
			t.Errorf("replayed outcome differs:\nlive   %+v\nreplay %+v", live.outcome, done.Outcome)
		}
		if got := mustSnapshot(t, m); !bytes.Equal(got, live.final) {
			t.Errorf("final snapshot differs from the live run's (%d vs %d bytes)", len(got), len(live.final))
		}
	})

	// A worker that restores any snapshot of the live run and replays the
	// rest of the journal ends the same way.
	t.Run("from every snapshot", func(t *testing.T) {
		for i, snap := range live.snaps {
			m, err := Restore(cfg, snap)
			if err != nil {
				t.Fatalf("restore after journal entry %d: %v", i, err)
			}
			r := newReplayer(live.journal)
			for _, j := range live.journal[:i+1] {
				r.used[j.Head.ID]++ // answers the snapshot already holds
			}
			effects, _, err := r.replay(t, m)
			if err != nil {
				t.Fatalf("replay from snapshot %d: %v", i, err)
			}
			assertSameRun(t, live.effects[live.seen[i]:], effects)
			if got := mustSnapshot(t, m); !bytes.Equal(got, live.final) {
				t.Errorf("replay from snapshot %d: final snapshot differs", i)
			}
		}
	})
}

// assertSameRun compares two effect sequences entry by entry.
func assertSameRun(tb testing.TB, want, got []string) {
	tb.Helper()
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			tb.Fatalf("effect %d of %d differs:\nwant %s\ngot  %s", i, len(want), w, g)
		}
	}
}

// TestReplayDetectsNondeterminism replays the journal of a live run under a
// drifted Config. A journal must stop at the first effect whose request
// changed, and only there; a change that does not touch any request replays
// cleanly.
func TestReplayDetectsNondeterminism(t *testing.T) {
	cfg, start := replayConfig(), replayStart()
	live := runLive(t, cfg, start)
	// nthOf is the id of the nth effect of a kind in the live run.
	nthOf := func(kind Kind, nth int) EffectID {
		var last EffectID
		for _, j := range live.journal {
			if j.Head.Key.Kind == kind && j.Head.ID != last {
				last = j.Head.ID
				if nth--; nth == 0 {
					return j.Head.ID
				}
			}
		}
		t.Fatalf("the live run has no %s number %d", kind, nth)
		return 0
	}
	temp := 0.2

	tests := []struct {
		name  string
		drift func(*Config)
		// at is the effect where a journal must notice; zero for none.
		at   EffectID
		kind Kind
	}{
		{"system prompt", func(c *Config) { c.System = "You are a reckless agent." }, nthOf(KindLLMCall, 1), KindLLMCall},
		{"model", func(c *Config) { c.Model = "other-model" }, nthOf(KindLLMCall, 1), KindLLMCall},
		{"sampling", func(c *Config) { c.Sampling.Temperature = &temp }, nthOf(KindLLMCall, 1), KindLLMCall},
		{"backoff", func(c *Config) { c.Limits.Backoff = func(int) time.Duration { return time.Hour } }, nthOf(KindSleep, 1), KindSleep},
		{"gate no longer suspends deploy", func(c *Config) { c.Hooks.BeforeTool = nil }, nthOf(KindToolCalls, 2), KindToolCalls},
		{"unused grace prompt", func(c *Config) { c.GracePrompt = "Wrap it up." }, 0, 0},
		{"more attempts", func(c *Config) { c.Limits.MaxAttempts = 5 }, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drifted := cfg
			tc.drift(&drifted)
			m, err := New(drifted, start)
			if err != nil {
				t.Fatal(err)
			}
			effects, done, err := newReplayer(live.journal).replay(t, m)
			if tc.at == 0 {
				if err != nil {
					t.Fatalf("a change that alters no request was flagged: %v", err)
				}
				assertSameRun(t, live.effects, effects)
				if !reflect.DeepEqual(done.Outcome, live.outcome) {
					t.Errorf("outcome differs")
				}
				return
			}
			if !errors.Is(err, errNondeterminism) {
				t.Fatalf("replay under a drifted config: got %v, want a nondeterminism error at effect %d", err, tc.at)
			}
			last := m.Next().Head()
			if last.ID != tc.at || last.Key.Kind != tc.kind {
				t.Fatalf("nondeterminism noticed at effect %d (%s), want effect %d (%s): %v", last.ID, last.Key.Kind, tc.at, tc.kind, err)
			}
			// Every journaled effect before the divergence was replayed
			// identically. (Fire-and-forget effects are not journaled; the
			// drift may show in them first.)
			want := slices.DeleteFunc(slices.Clone(live.effects), isFireAndForget)
			got := slices.DeleteFunc(slices.Clone(effects), isFireAndForget)
			assertSameRun(t, want[:len(got)-1], got[:len(got)-1])
			t.Logf("journal stops: %v", err)
		})
	}
}

// isFireAndForget reports whether an effectSig is of a Progress or an Emit.
func isFireAndForget(sig string) bool {
	return strings.HasPrefix(sig, "progress ") || strings.HasPrefix(sig, "emit ")
}

// A history digest handed in is the one the machine computes itself, and
// the model request's hash covers every history message through it.
func TestHistoryDigest(t *testing.T) {
	history := []Message{{Role: RoleUser, Text: "one"}, {Role: RoleAssistant, Text: "two"}, {Role: RoleUser, Text: "three"}}
	hashOfCall := func(h []Message, d *Digest) Hash {
		t.Helper()
		m, err := New(Config{Model: "m", System: "be brief"}, Start{Session: "s", Turn: "t", History: h, HistoryDigest: d,
			Input: Input{Messages: []Message{{Role: RoleUser, Text: "four"}}}})
		if err != nil {
			t.Fatal(err)
		}
		for {
			switch e := m.Next().(type) {
			case *SyncTools:
				if err := m.Deliver(ToolsSynced{ID: e.H.ID}); err != nil {
					t.Fatal(err)
				}
			case *LLMCall:
				return e.H.Hash
			case *Progress, *Emit:
			default:
				t.Fatalf("%T before the model call", e)
			}
		}
	}
	d := Digest{}.Extend(history...)
	if (Digest{}).Extend(history[:1]...).Extend(history[1:]...) != d {
		t.Fatal("extending a digest twice differs from extending it once")
	}
	computed, given := hashOfCall(history, nil), hashOfCall(history, &d)
	if computed != given {
		t.Fatalf("request hash with the digest given %s, computed %s", given, computed)
	}
	changed := slices.Clone(history)
	changed[0].Text = "uno"
	if hashOfCall(changed, nil) == computed {
		t.Fatal("changing the first history message left the request hash as it was")
	}
}

// A model request's hash extends the digest of the turn's own messages
// from the last request on; it is the hash of the whole request, as a
// machine restored mid-turn (with nothing to extend) computes it.
func TestRequestHashExtendsTheTurn(t *testing.T) {
	start := testStart()
	start.History = []Message{{Role: RoleUser, Text: "earlier"}, {Role: RoleAssistant, Text: "done before"}}
	m, err := New(baseConfig(), start)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	newBenchScript().drive(t, m, 0, func(e *LLMCall) {
		calls++
		snap, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		restored, err := Restore(baseConfig(), snap)
		if err != nil {
			t.Fatal(err)
		}
		if whole := restored.Next().(*LLMCall); whole.H.Hash != e.H.Hash {
			t.Fatalf("model call %d: hash %s, the whole request's %s", calls, e.H.Hash, whole.H.Hash)
		}
		if want := requestHashAnew(t, m, &e.Request); e.H.Hash != want {
			t.Fatalf("model call %d: hash %s, computed in one go %s", calls, e.H.Hash, want)
		}
	})
	if calls != benchIterations+1 {
		t.Fatalf("%d model calls, want %d", calls, benchIterations+1)
	}
}

// requestHashAnew is the model request's hash as RequestHashing 2 defines
// it, computed in one buffer with nothing kept from earlier calls.
func requestHashAnew(t *testing.T, m *Machine, req *ModelRequest) Hash {
	st := &m.st
	pre := len(req.Messages) - len(st.Messages)
	head := *req
	head.Messages = nil
	var buf bytes.Buffer
	buf.WriteByte(byte(KindLLMCall))
	enc := msgpack.NewEncoder(&buf)
	if err := enc.Encode(&head); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(req.Messages[:pre]); err != nil {
		t.Fatal(err)
	}
	buf.Write(st.HistoryDigest[:])
	buf.Write(binary.BigEndian.AppendUint64(nil, uint64(st.HistoryLen)))
	rest := st.HistoryDigest.Extend(req.Messages[pre+st.HistoryLen:]...)
	buf.Write(rest[:])
	return sha256.Sum256(buf.Bytes())
}

// A machine given a frame lays its requests out in it, without a copy of
// the history, and asks for the same effects as one that copies: same
// requests, same hashes, same outcome; the history is left as it was.
func TestFrameHoldsTheRequests(t *testing.T) {
	history := []Message{{Role: RoleUser, Text: "earlier"}, {Role: RoleAssistant, Text: "done before"}}
	frame := make([]Message, 1+len(history), 64)
	copy(frame[1:], history)
	framed, copied := testStart(), testStart()
	framed.History, framed.Frame = frame[1:], frame
	copied.History = slices.Clone(history)
	var hashes []Hash
	run := func(s Start, onCall func(*LLMCall)) *Machine {
		m, err := New(baseConfig(), s)
		if err != nil {
			t.Fatal(err)
		}
		return newBenchScript().drive(t, m, 0, onCall)
	}
	a := run(framed, func(e *LLMCall) {
		hashes = append(hashes, e.H.Hash)
		if msgs := e.Request.Messages; &msgs[0] != &frame[0] || &msgs[1] != &framed.History[0] {
			t.Fatal("the request is not laid out in the frame")
		}
	})
	i := 0
	b := run(copied, func(e *LLMCall) {
		if e.H.Hash != hashes[i] {
			t.Fatalf("model call %d: hash %s with a frame, %s without", i+1, hashes[i], e.H.Hash)
		}
		i++
	})
	if !reflect.DeepEqual(a.st.Messages, b.st.Messages) || i != len(hashes) || !reflect.DeepEqual(framed.History, history) {
		t.Fatal("a turn with a frame differs from one without, or changed its history")
	}
	// Anything else is no frame: a frame that is not the history's array.
	other := testStart()
	other.History, other.Frame = slices.Clone(history), frame
	m, err := New(baseConfig(), other)
	if err != nil {
		t.Fatal(err)
	}
	if &m.buf[0] == &frame[0] {
		t.Fatal("a frame around another array was used")
	}
}
