package turn

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzRestore feeds arbitrary bytes to Restore. It must never panic, must
// refuse with ErrSnapshot or ErrSnapshotVersion, and whatever it accepts must
// be a machine that keeps its invariants, snapshots to bytes that restore to
// the same machine, and can be driven to its end.
func FuzzRestore(f *testing.F) {
	for _, ws := range waitingStates() {
		m := ws.reach(f)
		f.Add(mustSnapshot(f, m))
		drain(f, m)
		f.Add(mustSnapshot(f, m))
	}
	f.Add([]byte{})
	f.Add([]byte(snapshotMagic))
	f.Add([]byte(snapshotMagic + "\x01\x80"))
	f.Add([]byte(snapshotMagic + "\x02\x80"))

	cfg := approvalConfig(time.Minute)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Restore(cfg, b)
		if err != nil {
			if !errors.Is(err, ErrSnapshot) && !errors.Is(err, ErrSnapshotVersion) {
				t.Fatalf("Restore error %q wraps neither ErrSnapshot nor ErrSnapshotVersion", err)
			}
			return
		}
		if err := m.st.check(); err != nil {
			t.Fatalf("Restore accepted a state that breaks an invariant: %v", err)
		}
		snap := mustSnapshot(t, m)
		r, err := Restore(cfg, snap)
		if err != nil {
			t.Fatalf("a snapshot of a restored machine does not restore: %v", err)
		}
		if again := mustSnapshot(t, r); !bytes.Equal(snap, again) {
			t.Fatalf("snapshot does not round-trip")
		}
		_, em := drain(t, m)
		_, er := drain(t, r)
		if effectSig(em) != effectSig(er) {
			t.Fatalf("restored twice, the outstanding effects differ:\n%s\n%s", effectSig(em), effectSig(er))
		}
		// Whatever was accepted can be driven on with well-formed answers
		// without breaking an invariant...
		d := &fuzzDriver{t: t, in: &fuzzInput{}, cfg: cfg, m: r}
		for range 50 {
			_, e := drain(t, r)
			if e.Kind() == KindDone {
				break
			}
			if err := r.Deliver(d.valid(e)); err != nil && !errors.Is(err, ErrInvalidResult) {
				t.Fatalf("a well-formed answer to %s was refused: %v", effectSig(e), err)
			}
			if err := r.st.check(); err != nil {
				t.Fatalf("invariant broken driving a restored machine: %v", err)
			}
		}
		// ...and ended: Cancel answers any effect.
		if em.Kind() != KindDone {
			if err := m.Deliver(Cancel{ID: em.Head().ID, Reason: "fuzz"}); err != nil {
				t.Fatalf("Cancel of the outstanding %s refused: %v", em.Kind(), err)
			}
			if err := m.st.check(); err != nil {
				t.Fatalf("invariant broken after cancelling a restored machine: %v", err)
			}
			if _, e := drain(t, m); e.Kind() != KindDone {
				t.Fatalf("cancelled machine yields %s, want done", effectSig(e))
			}
		}
	})
}

// Fuzz driver operations. The first two input bytes pick the config and the
// start; every further step reads an op byte and the bytes that op needs. An
// exhausted input reads as zeros.
const (
	opValid     = iota // a valid answer of the outstanding effect's kind
	opValid2           // (weighted twice)
	opPartial          // some tool results: maybe partial, unknown, repeated or malformed
	opDecisions        // a checkpoint or event result with arbitrary decisions
	opAnyKind          // a minimal result of an arbitrary kind, right id
	opWrongID          // an arbitrary result for another id
	opCancel           // cancel the turn
	opRestore          // snapshot, restore, and go on with the restored machine
	opNext             // take one effect from Next without answering
	opMalformed        // nil, an LLMResult with neither or both, a bad catalog
	numOps
)

var (
	fuzzCallIDs   = []string{"c0", "c1", "c2", "c3", "c4", "s0"}
	fuzzToolNames = []string{"read", "write", "approve", "danger", "ghost", ""}
	fuzzOutputs   = []string{"ok", "stop", "waiting for input", ""}
	fuzzCatalog   = []ToolSpec{{Name: "read"}, {Name: "write"}, {Name: "approve"}, {Name: "danger"}}
	// fuzzLongID is one byte over MaxIDBytes: the model may send it, the
	// machine must refuse it.
	fuzzLongID = strings.Repeat("x", MaxIDBytes+1)
)

type fuzzInput struct {
	data []byte
	pos  int
}

func (in *fuzzInput) byte() byte {
	if in.pos >= len(in.data) {
		return 0
	}
	in.pos++
	return in.data[in.pos-1]
}

func (in *fuzzInput) intn(n int) int { return int(in.byte()) % n }
func (in *fuzzInput) bool() bool     { return in.byte()&1 == 1 }
func (in *fuzzInput) exhausted() bool {
	return in.pos >= len(in.data)
}

func pick[T any](in *fuzzInput, xs []T) T { return xs[in.intn(len(xs))] }

// fuzzConfig builds a config from flag bits. Its hooks suspend "approve",
// block "danger", and optionally stop on a tool output "stop", emit after
// inference and stop on thirteen output tokens, add a message at the start
// and stop a start with history, stop before the fourth inference and note
// the run's end.
func fuzzConfig(flags byte) Config {
	cfg := Config{
		Model:  "fuzz-model",
		System: "fuzz",
		Limits: Limits{
			MaxIterations: 1 + int(flags&3),
			MaxAttempts:   1 + int(flags>>2&1)*2,
			Backoff:       func(a int) time.Duration { return time.Duration(a) * time.Millisecond },
		},
	}
	if flags&8 != 0 {
		cfg.DecisionWait = time.Minute
	}
	if flags&16 != 0 {
		cfg.Limits.MaxToolFailures = 2
	}
	if flags&32 != 0 {
		cfg.Limits.TokenBudget = 300
	}
	cfg.Hooks.BeforeTool = func(_ View, c ToolCall) Gate {
		switch c.Name {
		case "approve":
			return Gate{Verdict: Suspend, Ticket: Ticket{Reason: "needs approval", Data: c.Arguments}}
		case "danger":
			return Gate{Verdict: Block, Reason: "not allowed"}
		}
		return Gate{}
	}
	if flags&64 != 0 {
		cfg.Hooks.AfterTool = func(_ View, c ToolCall, r ToolResult) HookAction {
			if r.Output == "stop" {
				return HookAction{Stop: &StopRequest{Code: "tool_said_stop", Detail: c.ID}}
			}
			return HookAction{Emit: []Event{{Type: "tool.seen", CallID: c.ID}}}
		}
		cfg.Hooks.AfterInference = func(v View, r ModelResponse) HookAction {
			act := HookAction{Emit: []Event{{Type: "usage", Detail: strconv.FormatInt(r.Usage.Total(), 10)}}}
			if r.Usage.OutputTokens == 13 {
				act.Stop = &StopRequest{Code: "unlucky", Detail: "thirteen tokens"}
			}
			return act
		}
	}
	if flags&128 != 0 {
		cfg.Hooks.RunStart = func(v View) HookAction {
			act := HookAction{Messages: []Message{{Role: RoleSystem, Text: "started"}}}
			if len(v.Messages) > 2 { // a start with history
				act.Stop = &StopRequest{Code: "no_history_please"}
			}
			return act
		}
		cfg.Hooks.BeforeInference = func(v View) HookAction {
			if v.Iteration >= 3 {
				return HookAction{Stop: &StopRequest{Code: "enough"}}
			}
			return HookAction{}
		}
		cfg.Hooks.RunEnd = func(_ View, t Termination) HookAction {
			return HookAction{Messages: []Message{{Role: RoleSystem, Text: "ended " + t.Reason.String()}}}
		}
	}
	return cfg
}

// fuzzStart builds a start from flag bits: optionally a call left suspended
// by an earlier turn, and decisions in the input.
func fuzzStart(flags byte) Start {
	s := Start{Session: "fs", Turn: "ft", Input: Input{Messages: []Message{{Role: RoleUser, Text: "go"}}}}
	if flags&1 != 0 {
		c := ToolCall{ID: "s0", Name: "approve", Arguments: "{}"}
		s.History = []Message{
			{Role: RoleUser, Text: "earlier"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{c}},
			{Role: RoleTool, CallID: "s0", Name: "approve", Pending: true, Text: "awaiting decision"},
		}
		s.Suspended = []SuspendedCall{{Call: c, Ticket: Ticket{Reason: "needs approval"}, Iteration: 1}}
	}
	switch flags >> 1 & 7 {
	case 1:
		s.Input.Decisions = []Decision{{ID: "sd", CallID: "s0", Action: Resume, Mode: ResumeReplay}}
	case 2:
		s.Input.Decisions = []Decision{{ID: "sd", CallID: "s0", Action: Resume, Mode: ResumeUseResult, Payload: "fine"}}
	case 3:
		s.Input.Decisions = []Decision{{ID: "sd", CallID: "s0", Action: CancelCall}}
	case 4:
		s.Input.Decisions = []Decision{{ID: "sd", CallID: "nobody", Action: CancelCall}}
	case 5:
		s.Input.Decisions = []Decision{{ID: "sd", CallID: "s0", Action: Resume, Mode: ResumePassToTool, Payload: "yes"}}
	}
	return s
}

// fuzzDriver drives one machine from fuzz input and checks, after every
// step, everything a driver may rely on.
type fuzzDriver struct {
	t   *testing.T
	in  *fuzzInput
	cfg Config
	m   *Machine

	lastID  EffectID // the highest outstanding id seen
	lastSig string   // the signature of the outstanding effect with lastID
	// The accepted results in order, and each outstanding effect's
	// signature, to replay the run as a journal would.
	accepted []Result
	sigs     map[EffectID]string
	// What the Progress effects carried, in order.
	progressMsgs   []Message
	progressEvents []Event
}

func FuzzDrive(f *testing.F) {
	for _, s := range fuzzDriveSeeds {
		f.Add(s.input)
	}
	f.Fuzz(func(t *testing.T, data []byte) { runFuzzDrive(t, data) })
}

// runFuzzDrive interprets data as a driver program (see the op constants),
// checking everything after every step, and returns the termination the
// turn reached before the input ran out (zero if it had not ended). It then
// cancels a turn still running and checks the end once more.
func runFuzzDrive(t *testing.T, data []byte) Termination {
	in := &fuzzInput{data: data}
	cfg, start := fuzzConfig(in.byte()), fuzzStart(in.byte())
	m, err := New(cfg, start)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	d := &fuzzDriver{t: t, in: in, cfg: cfg, m: m, sigs: map[EffectID]string{}}
	d.verify(nil)
	for step := 0; step < 200 && !in.exhausted(); step++ {
		d.step(in.intn(numOps))
	}
	ended := d.m.Termination()
	if e := d.outstanding(); e.Kind() != KindDone {
		d.deliver(Cancel{ID: e.Head().ID, Reason: "fuzz input ended"})
	}
	if e := d.outstanding(); e.Kind() != KindDone {
		t.Fatalf("after Cancel the machine yields %s", effectSig(e))
	}
	d.replay(start)
	return ended
}

// replay feeds the accepted results to a fresh machine, as a worker
// replaying the journal would, and demands the same effects and end state.
func (d *fuzzDriver) replay(start Start) {
	d.t.Helper()
	m, err := New(d.cfg, start)
	if err != nil {
		d.t.Fatal(err)
	}
	for i, r := range d.accepted {
		_, e := drain(d.t, m)
		if got, want := effectSig(e), d.sigs[e.Head().ID]; got != want {
			d.t.Fatalf("replaying accepted result %d, effect %d differs:\nrun    %s\nreplay %s", i, e.Head().ID, want, got)
		}
		if err := m.Deliver(r); err != nil {
			d.t.Fatalf("replaying accepted result %d (%T): %v", i, r, err)
		}
	}
	drain(d.t, m)
	if a, b := mustSnapshot(d.t, m), mustSnapshot(d.t, d.m); !bytes.Equal(a, b) {
		d.t.Fatalf("replaying the %d accepted results ends in another state", len(d.accepted))
	}
}

// fuzzDriveSeeds are hand-assembled programs that reach the interesting
// states; the fuzzer mutates from there. The bytes each op reads:
//
//	header                 config flags (fuzzConfig), start flags (fuzzStart)
//	opValid on SyncTools   odd: a catalog without "approve" and "danger"
//	opValid on LLMCall     usage in, usage out, then %6: 0 text, 3 retryable
//	                       error, 4 fatal error, else calls: text, count-1,
//	                       and per call id (%7), tool (%6), arguments
//	opValid on ToolCalls   per running call: status-1 (%3), output (%4)
//	opValid on Checkpoint  message (%4: 1 user, 2 system), then per suspended
//	                       call: decision id, payload, %5: 0 none, 1 cancel,
//	                       else resume with mode-1 (%3) from one more byte
//	opValid on AwaitEvent  as Checkpoint, then timed-out (odd)
//	opPartial              count (%4), per result: a call from the batch
//	                       and the id pool, %4: 0 keeps it, else one more
//	                       byte picks from the batch; status (%5), output
//	                       (%4)
//	opDecisions            message (%4), count (%4), per decision: id, call,
//	                       action, mode, payload; odd: a CheckpointResult,
//	                       else an EventResult and timed-out (odd)
//	opAnyKind              kind (%7);  opWrongID: which id (%5), kind (%7)
//	opMalformed            which (%4)
var fuzzDriveSeeds = []struct {
	name  string
	input []byte
	want  Reason // how the turn ends before the input runs out; 0: it does not
}{
	{"plain answer", []byte{0, 0,
		opValid, 0, // all tools
		opValid, 10, 2, 0, // text
		opValid, 0, // nothing arrives
	}, NaturalEnd},
	{"two calls answered one at a time", []byte{3, 0, // four iterations
		opValid, 0,
		opValid, 10, 5, 1, 0, 1, 0, 0, 0, 1, 1, 1, // c0 read, c1 write
		opPartial, 1, 0, 1, 1, 1, 0, // c1 ok
		opPartial, 1, 0, 1, 0, 2, 1, // c0 error
		opValid, 1, // a user message arrives
		opValid, 10, 2, 0, // text
		opValid, 0,
	}, NaturalEnd},
	{"retry, sleep and restores", []byte{4, 0, // three attempts
		opValid, 0,
		opValid, 1, 1, 3, // retryable error
		opRestore,
		opValid, // sleep done
		opRestore,
		opValid, 1, 1, 1, 1, 0, 2, 0, 0, // c2 read
		opCancel,
	}, Cancelled},
	{"gate-suspended call parked on an await and resumed", []byte{8 | 3, 0, // decision wait
		opValid, 0,
		opValid, 0, 0, 1, 0, 0, 0, 2, 0, // c0 approve: suspended by the gate
		opValid, 0, 0, 0, 0, // no decision: the run parks
		opRestore,
		opValid, 0, 1, 1, 2, 2, 0, // resume pass-to-tool, not timed out
		opValid, 0, 0, // c0 ok
		opValid, 0,
		opValid, 0, 0, 0, // text
		opValid, 0,
	}, NaturalEnd},
	{"earlier turn's call resumed at sync, pending again, cancelled", []byte{8 | 3, 3, // suspended s0, resume replay
		opValid, 0, // the decision re-runs s0
		opRestore,
		opValid, 2, 2, // pending
		opValid, 0, 3, 0, 1, // cancel s0
		opValid, 0, 0, 0,
		opValid, 0,
	}, NaturalEnd},
	{"pending result resumed with a result", []byte{8 | 64 | 3, 0, // decision wait, tool hooks
		opValid, 0,
		opValid, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, // c0 read, c1 read
		opPartial, 1, 0, 1, 0, 3, 2, // c0 pending
		opValid, 0, 0, // c1 ok
		opDecisions, 0, 1, 1, 0, 1, 2, 0, 1, // resume c0 use-result, as a checkpoint result
		opWrongID, 2, 0,
		opValid, 0, 0, 0,
		opValid, 0,
	}, NaturalEnd},
	{"await times out", []byte{8, 0,
		opValid, 0,
		opValid, 0, 0, 1, 0, 0, 0, 2, 0, // c0 approve
		opValid, 0, 0, 0, 0,
		opValid, 0, 0, 0, 0, 1, // timed out
		opValid, // refused: the turn is over
	}, Suspended},
	{"wrong ids, wrong kinds, malformed results", []byte{0, 0,
		opWrongID, 0, 0,
		opAnyKind, 3,
		opMalformed, 0,
		opMalformed, 3,
		opValid, 0,
		opMalformed, 1,
		opMalformed, 2,
		opNext, opNext,
		opValid, 0, 0, 4, // fatal provider error
		opValid,
	}, Error},
	{"run start hook stops a start with history", []byte{128, 1}, BehaviorRequested},
	{"blocked and unknown tools hit the failure limit", []byte{127, 5, // all but the phase hooks; s0 resumed with a result
		opValid, 0,
		opValid, 100, 10, 1, 0, 2, 0, 3, 0, 1, 4, 0, 2, 0, 0, // c0 danger, c1 ghost, c2 read
		opValid, 1, 0, // c2 fails
		opValid, 0,
	}, Stopped},
	{"grace iteration", []byte{0, 0, // one iteration
		opValid, 0,
		opValid, 0, 0, 1, 0, 0, 0, 0, 0, // c0 read
		opValid, 0, 0,
		opValid, 0,
		opValid, 0, 0, 1, 0, 0, 1, 0, 0, // calls again, in the grace iteration
	}, Stopped},
	{"cancel mid-batch with a suspended call", []byte{0, 0,
		opValid, 0,
		opValid, 0, 0, 1, 0, 1, 0, 2, 0, 1, 0, 0, // c0 approve, c1 read
		opNext,
		opCancel,
	}, Cancelled},
	{"decisions for anything", []byte{8, 1,
		opValid, 0, // s0 still suspended: the run parks
		opDecisions, 3, 3, 0, 6, 1, 1, 0, 1, 5, 2, 3, 1, 2, 0, 1, 0, 4, 0, // forged message: refused
		opDecisions, 0, 3, 0, 6, 1, 1, 0, 1, 5, 2, 3, 1, 2, 0, 1, 0, 4, 0, 0,
		opRestore,
	}, 0},
}

func TestFuzzDriveSeeds(t *testing.T) {
	for _, s := range fuzzDriveSeeds {
		t.Run(s.name, func(t *testing.T) {
			if got := runFuzzDrive(t, s.input).Reason; got != s.want {
				t.Errorf("seed ended %s, want %s: its bytes no longer mean what they say", got, s.want)
			}
		})
	}
}

// outstanding drains the queue, recording what Progress carried and checking
// ids, and returns the effect that waits for an answer (or Done).
func (d *fuzzDriver) outstanding() Effect {
	d.t.Helper()
	for i := 0; ; i++ {
		e := d.m.Next()
		d.observe(e)
		if e.Head().ID != 0 || e.Kind() == KindDone {
			return e
		}
		if i > 10000 {
			d.t.Fatalf("Next yielded more than %d fire-and-forget effects in a row", i)
		}
	}
}

// observe checks one effect returned by Next.
func (d *fuzzDriver) observe(e Effect) {
	d.t.Helper()
	switch e := e.(type) {
	case nil:
		d.t.Fatalf("Next returned nil")
	case *Progress:
		d.progressMsgs = append(d.progressMsgs, e.Messages...)
		d.progressEvents = append(d.progressEvents, e.Events...)
	case *LLMCall:
		if missing := unanswered(e.Request.Messages); len(missing) > 0 {
			d.t.Fatalf("model call %d sends tool calls %v without an answer", e.H.ID, missing)
		}
		if e.Attempt < 1 || e.Attempt > d.cfg.withDefaults().Limits.MaxAttempts {
			d.t.Fatalf("model call %d is attempt %d", e.H.ID, e.Attempt)
		}
	case *ToolCalls:
		if len(e.Calls) == 0 {
			d.t.Fatalf("tool batch %d is empty", e.H.ID)
		}
		for _, c := range e.Calls {
			if c.Key.Call != c.Call.ID || c.Key.Effect != e.H.ID || c.Key.Kind != KindToolCall {
				d.t.Fatalf("call %s of batch %d has key %s", c.Call.ID, e.H.ID, c.Key)
			}
		}
	}
	h := e.Head()
	if h.ID == 0 {
		return
	}
	if h.Key.Effect != h.ID || h.Key.Kind != e.Kind() || h.Key.Session != "fs" || h.Key.Turn != "ft" {
		d.t.Fatalf("effect %d has key %s", h.ID, h.Key)
	}
	sig := effectSig(e)
	switch {
	case h.ID < d.lastID:
		d.t.Fatalf("effect id went back from %d to %d: %s", d.lastID, h.ID, sig)
	case h.ID == d.lastID && sig != d.lastSig:
		d.t.Fatalf("effect %d re-yielded differently:\nfirst %s\nthen  %s", h.ID, d.lastSig, sig)
	case h.ID > d.lastID+1:
		d.t.Fatalf("effect id jumped from %d to %d", d.lastID, h.ID)
	}
	d.lastID, d.lastSig = h.ID, sig
	d.sigs[h.ID] = sig
}

// unanswered lists the tool calls in msgs with no tool message after them.
func unanswered(msgs []Message) []string {
	var missing []string
	for i, msg := range msgs {
		for _, c := range msg.ToolCalls {
			if !slices.ContainsFunc(msgs[i+1:], func(m Message) bool { return m.Role == RoleTool && m.CallID == c.ID }) {
				missing = append(missing, c.ID)
			}
		}
	}
	return missing
}

func (d *fuzzDriver) step(op int) {
	d.t.Helper()
	in := d.in
	switch op {
	case opRestore:
		d.restore()
		return
	case opNext:
		d.observe(d.m.Next())
		return
	}
	e := d.outstanding()
	id := e.Head().ID
	var r Result
	switch op {
	case opValid, opValid2:
		r = d.valid(e)
	case opPartial:
		r = d.toolResults(e, false)
	case opDecisions:
		msgs, decs := d.injection(true)
		if in.bool() {
			r = CheckpointResult{ID: id, Messages: msgs, Decisions: decs}
		} else {
			r = EventResult{ID: id, TimedOut: in.bool(), Messages: msgs, Decisions: decs}
		}
	case opAnyKind:
		r = d.anyKind(id)
	case opWrongID:
		wrong := pick(in, []EffectID{0, id - 1, id + 1, id + 2, 1 << 40})
		r = d.anyKind(wrong)
	case opCancel:
		r = Cancel{ID: id, Reason: "fuzz cancel"}
	case opMalformed:
		switch in.intn(4) {
		case 0:
			r = nil
		case 1:
			r = LLMResult{ID: id}
		case 2:
			r = LLMResult{ID: id, Response: &ModelResponse{}, Err: &CallError{}}
		case 3:
			r = ToolsSynced{ID: id, Tools: []ToolSpec{{Name: "read"}, {Name: "read"}}}
		}
	}
	d.deliver(r)
}

// valid builds a well-formed answer of the outstanding effect's kind.
func (d *fuzzDriver) valid(e Effect) Result {
	in, id := d.in, e.Head().ID
	switch e := e.(type) {
	case *SyncTools:
		tools := slices.Clone(fuzzCatalog)
		if in.bool() {
			tools = tools[:2] // "approve" and "danger" become unknown tools
		}
		return ToolsSynced{ID: id, Tools: tools}
	case *LLMCall:
		usage := Usage{InputTokens: int64(in.intn(200)), OutputTokens: int64(in.intn(50))}
		switch in.intn(6) {
		case 0:
			return LLMResult{ID: id, Response: &ModelResponse{Text: "answer", Finish: FinishStop, Usage: usage}}
		case 3:
			wait := pick(in, []time.Duration{0, 5 * time.Millisecond, time.Hour})
			return LLMResult{ID: id, Err: &CallError{Retryable: true, Code: "429", Message: "slow down", RetryAfter: wait}}
		case 4:
			return LLMResult{ID: id, Err: &CallError{Code: "400", Message: "bad request"}}
		}
		resp := &ModelResponse{Text: pick(in, []string{"", "calling"}), Finish: FinishToolCalls, Usage: usage}
		for n := 1 + in.intn(3); n > 0; n-- {
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{
				ID:        pick(in, append(fuzzCallIDs, "", fuzzLongID)),
				Name:      pick(in, fuzzToolNames),
				Arguments: fmt.Sprintf(`{"n":%d}`, in.intn(4)),
			})
		}
		return LLMResult{ID: id, Response: resp}
	case *ToolCalls:
		return d.toolResults(e, true)
	case *Checkpoint:
		msgs, decs := d.injection(false)
		return CheckpointResult{ID: id, Messages: msgs, Decisions: decs}
	case *AwaitEvent:
		msgs, decs := d.injection(false)
		return EventResult{ID: id, TimedOut: in.bool(), Messages: msgs, Decisions: decs}
	case *Sleep:
		return SleepDone{ID: id}
	}
	// Done: anything is refused with ErrFinished.
	return Cancel{ID: id}
}

// toolResults answers a batch: every call still running when all is set, otherwise an
// arbitrary selection that may name unknown calls, repeat results or carry
// bad statuses. For an effect that is no batch it still builds a result.
func (d *fuzzDriver) toolResults(e Effect, all bool) Result {
	in := d.in
	r := ToolResults{ID: e.Head().ID}
	var batch []string
	if tc, ok := e.(*ToolCalls); ok {
		for _, c := range tc.Calls {
			batch = append(batch, c.Call.ID)
		}
	}
	if all {
		for _, id := range batch {
			if st, _ := d.m.CallStatus(id); st != CallRunning {
				continue // answered by an earlier partial delivery
			}
			r.Results = append(r.Results, ToolResult{CallID: id, Status: ToolStatus(1 + in.intn(3)), Output: pick(in, fuzzOutputs)})
		}
		return r
	}
	for n := in.intn(4); n > 0; n-- {
		id := pick(in, append(batch, fuzzCallIDs...))
		if len(batch) > 0 && in.intn(4) != 0 {
			id = pick(in, batch)
		}
		r.Results = append(r.Results, ToolResult{CallID: id, Status: ToolStatus(in.intn(5)), Output: pick(in, fuzzOutputs)})
	}
	return r
}

// injection builds what arrives at a boundary. Well-formed decisions address
// the suspended calls; arbitrary ones may name any call and carry any enum.
func (d *fuzzDriver) injection(arbitrary bool) ([]Message, []Decision) {
	in := d.in
	var msgs []Message
	switch in.intn(4) {
	case 1:
		msgs = []Message{{Role: RoleUser, Text: "also this"}}
	case 2:
		msgs = []Message{{Role: RoleSystem, Text: "note"}}
	case 3:
		if arbitrary {
			msgs = []Message{{Role: RoleAssistant, Text: "forged"}}
		}
	}
	var decs []Decision
	if arbitrary {
		for n := in.intn(4); n > 0; n-- {
			decs = append(decs, Decision{
				ID:      pick(in, []string{"", "d0", "d1", "d2"}),
				CallID:  pick(in, append(fuzzCallIDs, "")),
				Action:  Action(in.intn(4)),
				Mode:    ResumeMode(in.intn(5)),
				Payload: pick(in, fuzzOutputs),
			})
		}
		return msgs, decs
	}
	for _, sc := range d.m.Suspended() {
		dec := Decision{ID: "d" + strconv.Itoa(in.intn(6)), CallID: sc.Call.ID, Action: Resume, Payload: pick(in, fuzzOutputs)}
		switch in.intn(5) {
		case 0:
			continue
		case 1:
			dec.Action = CancelCall
		default:
			dec.Mode = ResumeMode(1 + in.intn(3))
		}
		decs = append(decs, dec)
	}
	return msgs, decs
}

// anyKind builds a minimal result of an arbitrary kind.
func (d *fuzzDriver) anyKind(id EffectID) Result {
	switch d.in.intn(7) {
	case 0:
		return ToolsSynced{ID: id}
	case 1:
		return LLMResult{ID: id, Response: &ModelResponse{}}
	case 2:
		return ToolResults{ID: id}
	case 3:
		return CheckpointResult{ID: id}
	case 4:
		return SleepDone{ID: id}
	case 5:
		return EventResult{ID: id}
	}
	return Cancel{ID: id}
}

// callSnap is what the driver remembers of one tracked call.
type callSnap struct {
	Status    CallStatus
	Iteration int
	Round     int
	// Outcome is the tool result the call's status records: its result,
	// or for a suspended call the pending result that suspended it.
	Outcome *ToolResult
}

func (d *fuzzDriver) calls() map[string]callSnap {
	out := map[string]callSnap{}
	for _, c := range d.m.st.Calls {
		s := callSnap{Status: c.Status, Iteration: c.Iteration, Round: c.Round}
		switch {
		case c.Result != nil:
			r := *c.Result
			s.Outcome = &r
		case c.Status == CallSuspended:
			s.Outcome = &ToolResult{CallID: c.Call.ID, Status: ToolPending, Output: c.Ticket.Reason}
		}
		out[c.Call.ID] = s
	}
	return out
}

// deliver feeds r and checks what it did.
func (d *fuzzDriver) deliver(r Result) {
	d.t.Helper()
	before := mustSnapshot(d.t, d.m)
	calls := d.calls()
	startDecs := slices.Clone(d.m.st.StartDecs)
	wasDone := d.m.st.Phase == phaseDone
	out := d.m.st.Out

	err := d.m.Deliver(r)
	if err != nil {
		if after := mustSnapshot(d.t, d.m); !bytes.Equal(before, after) {
			d.t.Fatalf("Deliver(%T) refused with %q but changed the state", r, err)
		}
		switch {
		case wasDone && !errors.Is(err, ErrFinished):
			d.t.Fatalf("Deliver after Done: got %v, want ErrFinished", err)
		case !errors.Is(err, ErrFinished) && !errors.Is(err, ErrUnknownEffect) &&
			!errors.Is(err, ErrUnexpectedResult) && !errors.Is(err, ErrInvalidResult):
			d.t.Fatalf("Deliver(%T) error %q wraps none of the documented errors", r, err)
		}
		d.verify(nil)
		return
	}
	if wasDone {
		d.t.Fatalf("Deliver(%T) accepted after Done", r)
	}
	d.accepted = append(d.accepted, r)
	if r.Answers() != out {
		d.t.Fatalf("Deliver accepted a result for %d while %d was outstanding", r.Answers(), out)
	}
	d.checkTransitions(calls, r, startDecs)
	if tr, ok := r.(ToolResults); ok {
		d.checkToolOutcomes(calls, tr, before)
	}
	d.verify(r)
}

// checkTransitions demands that every tracked call moved only as
// CallStatus.CanBecome allows, or from Suspended through Resuming (to
// Running or Succeeded) when the delivery carried a resume decision for it.
func (d *fuzzDriver) checkTransitions(before map[string]callSnap, r Result, startDecs []Decision) {
	d.t.Helper()
	var decs []Decision
	switch r := r.(type) {
	case CheckpointResult:
		decs = r.Decisions
	case EventResult:
		decs = r.Decisions
	case ToolsSynced:
		decs = startDecs
	}
	resumed := func(id string) bool {
		return slices.ContainsFunc(decs, func(dec Decision) bool { return dec.CallID == id && dec.Action == Resume })
	}
	for id, now := range d.calls() {
		was, ok := before[id]
		if ok && (was.Iteration != now.Iteration || was.Status.Terminal() && was.Round != now.Round) {
			// A new round drops finished calls, so this is a new call
			// that reuses the id of a finished one.
			ok = false
		}
		if !ok {
			if now.Status != CallNew && !CallNew.CanBecome(now.Status) {
				d.t.Fatalf("new call %s starts %s", id, now.Status)
			}
			continue
		}
		if was.Status == now.Status {
			continue
		}
		viaResuming := was.Status == CallSuspended && resumed(id) &&
			CallSuspended.CanBecome(CallResuming) && CallResuming.CanBecome(now.Status)
		if !was.Status.CanBecome(now.Status) && !viaResuming {
			d.t.Fatalf("call %s went %s -> %s on %T, which CanBecome does not allow", id, was.Status, now.Status, r)
		}
	}
}

// checkToolOutcomes: once a call of the batch has an outcome (succeeded,
// failed, or suspended on a pending result), a later result for it must be
// refused unless it repeats the recorded one, and a delivery of repeats
// only changes nothing.
func (d *fuzzDriver) checkToolOutcomes(before map[string]callSnap, r ToolResults, snap []byte) {
	d.t.Helper()
	repeatsOnly := true
	for _, res := range r.Results {
		was := before[res.CallID]
		if was.Status == CallRunning {
			repeatsOnly = false
			continue
		}
		if was.Outcome == nil || *was.Outcome != res {
			d.t.Fatalf("call %s was already %s, yet a different result %+v was accepted", res.CallID, was.Status, res)
		}
	}
	if repeatsOnly {
		if after := mustSnapshot(d.t, d.m); !bytes.Equal(snap, after) {
			d.t.Fatalf("repeating recorded tool results %+v changed the state", r.Results)
		}
	}
}

// restore snapshots the machine, restores it, demands the same state and the
// same pending effects, and goes on with the restored machine.
func (d *fuzzDriver) restore() {
	d.t.Helper()
	snap := mustSnapshot(d.t, d.m)
	r, err := Restore(d.cfg, snap)
	if err != nil {
		d.t.Fatalf("Restore of a live snapshot: %v", err)
	}
	if again := mustSnapshot(d.t, r); !bytes.Equal(snap, again) {
		d.t.Fatalf("snapshot of the restored machine differs")
	}
	qm, em := drain(d.t, d.m)
	qr, er := drain(d.t, r)
	if len(qm) != len(qr) {
		d.t.Fatalf("restored machine queued %d effects, original %d", len(qr), len(qm))
	}
	for i := range qm {
		if effectSig(qm[i]) != effectSig(qr[i]) {
			d.t.Fatalf("queued effect %d differs after restore:\n%s\n%s", i, effectSig(qm[i]), effectSig(qr[i]))
		}
		d.observe(qr[i])
	}
	if effectSig(em) != effectSig(er) {
		d.t.Fatalf("outstanding effect differs after restore:\n%s\n%s", effectSig(em), effectSig(er))
	}
	d.observe(er)
	d.m = r
	d.verify(nil)
}

// verify checks the invariants, and at the end the outcome.
func (d *fuzzDriver) verify(r Result) {
	d.t.Helper()
	m := d.m
	if err := m.st.check(); err != nil {
		d.t.Fatalf("invariant broken after %T: %v", r, err)
	}
	if m.st.Phase != phaseDone {
		return
	}
	o := m.outcome()
	switch {
	case o.Termination.Reason == Suspended && (o.Status != StatusWaiting || len(o.Suspended) == 0):
		d.t.Fatalf("turn ended suspended with status %s and %d suspended calls", o.Status, len(o.Suspended))
	case o.Termination.Reason != Suspended && (o.Status != StatusDone || len(o.Suspended) != 0):
		d.t.Fatalf("turn ended %s with status %s and %d suspended calls", o.Termination, o.Status, len(o.Suspended))
	case o.Iterations != m.st.Iteration:
		d.t.Fatalf("outcome counts %d iterations, state %d", o.Iterations, m.st.Iteration)
	}
	if missing := unanswered(m.Messages()); len(missing) > 0 {
		d.t.Fatalf("turn ended %s with tool calls %v unanswered", o.Termination, missing)
	}
	// Everything new reached the driver through Progress, in order.
	d.outstanding()
	if !slices.EqualFunc(d.progressMsgs, o.Messages, messagesEqual) {
		d.t.Fatalf("Progress carried %d messages, the outcome has %d new ones", len(d.progressMsgs), len(o.Messages))
	}
	if !slices.Equal(d.progressEvents, m.Events()) {
		d.t.Fatalf("Progress carried %d events, the turn recorded %d", len(d.progressEvents), len(m.Events()))
	}
}

func messagesEqual(a, b Message) bool {
	return a.Role == b.Role && a.Text == b.Text && slices.Equal(a.ToolCalls, b.ToolCalls) &&
		a.CallID == b.CallID && a.Name == b.Name && a.Error == b.Error && a.Pending == b.Pending
}

// TestToolResultAfterPending pins what FuzzDrive found (inputs of 30 bytes:
// sync, two calls, a pending result for one, then another result for it).
// A pending result is the call's outcome for this batch: the call is
// Suspended and only a decision may move it on (Suspended -> Resuming).
// The machine must refuse a different later result and treat an identical
// repeat as a no-op, as it does for ok and error results.
func TestToolResultAfterPending(t *testing.T) {
	pending := ToolResult{CallID: "c1", Status: ToolPending, Output: "needs a password"}
	tests := []struct {
		name  string
		later ToolResult
	}{
		{"identical pending repeated", pending},
		{"pending then ok", ToolResult{CallID: "c1", Status: ToolOK, Output: "read"}},
		{"pending then error", ToolResult{CallID: "c1", Status: ToolError, Output: "failed"}},
		{"pending then another pending", ToolResult{CallID: "c1", Status: ToolPending, Output: "needs a token"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(baseConfig(), testStart())
			if err != nil {
				t.Fatal(err)
			}
			mustDeliver(t, m, syncTools(testTools...)(outstanding(t, m)))
			mustDeliver(t, m, replyCalls(call("c1", "read"), call("c2", "write"))(outstanding(t, m)))
			batch := outstanding(t, m)
			mustDeliver(t, m, toolResults(pending)(batch))
			// c2 still runs, so the batch stays outstanding.
			if e := outstanding(t, m); e.Head().ID != batch.Head().ID {
				t.Fatalf("batch %d closed early; outstanding is %s", batch.Head().ID, effectSig(e))
			}
			before := mustSnapshot(t, m)
			events := len(m.Events())

			err = m.Deliver(ToolResults{ID: batch.Head().ID, Results: []ToolResult{tc.later}})
			status, _ := m.CallStatus("c1")
			switch {
			case tc.later == pending && err != nil:
				t.Fatalf("repeating the identical pending result was refused: %v", err)
			case tc.later == pending && !bytes.Equal(before, mustSnapshot(t, m)):
				t.Fatalf("bug: repeating the identical pending result is not a no-op: new events %v", m.Events()[events:])
			case tc.later != pending && err == nil:
				t.Fatalf("bug: a %+v after the pending result was accepted; c1 went suspended -> %s (CanBecome: %v), events %v",
					tc.later, status, CallSuspended.CanBecome(status), m.Events()[events:])
			case tc.later != pending && !errors.Is(err, ErrInvalidResult):
				t.Fatalf("refused with %v, want ErrInvalidResult", err)
			}
			if status != CallSuspended {
				t.Fatalf("c1 is %s, want it still suspended", status)
			}
		})
	}
}
