package turn

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs the scripts in testdata/. Regenerate expectations with
// go test ./turn -run TestScenarios -rewrite, and commit only diffs you understand.
func TestScenarios(t *testing.T) {
	// Only the scripts: testdata/fuzz holds the fuzzers' corpus.
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenario scripts: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			h := &harness{t: t}
			datadriven.RunTest(t, path, h.handle)
		})
	}
}

// harness drives one machine from a script. After every step it checks the
// state invariants and that a snapshot restores to the same outstanding effect.
type harness struct {
	t    *testing.T
	cfg  Config
	m    *Machine
	turn int
}

func (h *harness) handle(t *testing.T, d *datadriven.TestData) string {
	h.t = t
	switch d.Cmd {
	case "new":
		h.cfg = scriptConfig(t, d)
		h.turn = 1
		return h.start(d, Start{Session: "s1", Turn: "t1"})
	case "continue":
		// A later turn on the same session, built from the last outcome.
		done, ok := h.m.Next().(*Done)
		if !ok {
			d.Fatalf(t, "continue: the previous turn has not finished")
		}
		h.turn++
		return h.start(d, Start{Session: "s1", Turn: "t" + strconv.Itoa(h.turn),
			History: slices.Clone(h.m.Messages()), Suspended: done.Outcome.Suspended})
	case "tools":
		r := ToolsSynced{ID: h.id(d)}
		for _, line := range lines(d.Input) {
			name, desc, _ := strings.Cut(line, ":")
			r.Tools = append(r.Tools, ToolSpec{Name: strings.TrimSpace(name), Description: strings.TrimSpace(desc), Schema: `{"type":"object"}`})
		}
		return h.deliver(r)
	case "llm":
		return h.deliver(LLMResult{ID: h.id(d), Response: scriptResponse(t, d)})
	case "llm-error":
		e := &CallError{Retryable: d.HasArg("retryable")}
		if d.HasArg("code") {
			d.ScanArgs(t, "code", &e.Code)
		}
		if d.HasArg("retry-after") {
			e.RetryAfter = scanDuration(t, d, "retry-after")
		}
		e.Message = strings.TrimSpace(d.Input)
		return h.deliver(LLMResult{ID: h.id(d), Err: e})
	case "results":
		r := ToolResults{ID: h.id(d)}
		for _, line := range lines(d.Input) {
			f := strings.SplitN(line, " ", 3)
			res := ToolResult{CallID: f[0], Status: map[string]ToolStatus{"ok": ToolOK, "error": ToolError, "pending": ToolPending}[f[1]]}
			if len(f) > 2 {
				res.Output = f[2]
			}
			r.Results = append(r.Results, res)
		}
		return h.deliver(r)
	case "checkpoint":
		msgs, decs := scriptInjection(t, d)
		return h.deliver(CheckpointResult{ID: h.id(d), Messages: msgs, Decisions: decs})
	case "event":
		msgs, decs := scriptInjection(t, d)
		return h.deliver(EventResult{ID: h.id(d), TimedOut: d.HasArg("timeout"), Messages: msgs, Decisions: decs})
	case "sleep-done":
		return h.deliver(SleepDone{ID: h.id(d)})
	case "exec":
		return h.deliver(h.execResult(d))
	case "children":
		r := scriptOutcomes(d)
		r.ID = h.id(d)
		return h.deliver(r)
	case "cancel":
		return h.deliver(Cancel{ID: h.id(d), Reason: strings.TrimSpace(d.Input)})
	case "state":
		return describeState(h.m)
	case "transcript":
		var b strings.Builder
		for _, msg := range h.m.Messages() {
			b.WriteString(describeMessage(msg))
			b.WriteByte('\n')
		}
		return b.String()
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func (h *harness) start(d *datadriven.TestData, s Start) string {
	s.Input.Messages, s.Input.Decisions = scriptInjection(h.t, d)
	m, err := New(h.cfg, s)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	h.m = m
	return h.drain()
}

// id is the outstanding effect's id unless the script names another.
func (h *harness) id(d *datadriven.TestData) EffectID {
	if d.HasArg("id") {
		var id uint64
		d.ScanArgs(h.t, "id", &id)
		return EffectID(id)
	}
	return h.m.Next().Head().ID
}

func (h *harness) deliver(r Result) string {
	before, err := h.m.Snapshot()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.m.Deliver(r); err != nil {
		after, _ := h.m.Snapshot()
		if !bytes.Equal(before, after) {
			h.t.Fatalf("a refused result changed the state: %v", err)
		}
		return "error: " + err.Error() + "\n"
	}
	return h.drain()
}

// drain prints every effect up to and including the outstanding one, after
// checking invariants and a snapshot round trip.
func (h *harness) drain() string {
	h.t.Helper()
	if err := h.m.st.check(); err != nil {
		h.t.Fatalf("invariant broken: %v", err)
	}
	h.roundTrip()
	var b strings.Builder
	for {
		e := h.m.Next()
		b.WriteString(describeEffect(e))
		if e.Head().ID != 0 || e.Kind() == KindDone {
			return b.String()
		}
	}
}

// roundTrip restores a snapshot into a fresh machine and demands the same
// pending effects and outstanding effect, hash included, and identical bytes
// on a second snapshot.
func (h *harness) roundTrip() {
	h.t.Helper()
	snap, err := h.m.Snapshot()
	if err != nil {
		h.t.Fatal(err)
	}
	r, err := Restore(h.cfg, snap)
	if err != nil {
		h.t.Fatalf("restore: %v", err)
	}
	again, _ := r.Snapshot()
	if !bytes.Equal(snap, again) {
		h.t.Fatalf("snapshot of a restored machine differs")
	}
	if !reflect.DeepEqual(r.out, h.m.out) {
		h.t.Fatalf("restored outstanding effect differs:\n%s\nvs\n%s", describeEffect(r.out), describeEffect(h.m.out))
	}
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// scriptConfig reads the machine's limits and test hooks from the command's
// arguments.
func scriptConfig(t *testing.T, d *datadriven.TestData) Config {
	cfg := Config{Model: "test-model", System: "You are a test agent."}
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "max-iter":
			cfg.Limits.MaxIterations = atoi(t, a.Vals[0])
		case "budget":
			cfg.Limits.TokenBudget = int64(atoi(t, a.Vals[0]))
		case "max-fail":
			cfg.Limits.MaxToolFailures = atoi(t, a.Vals[0])
		case "attempts":
			cfg.Limits.MaxAttempts = atoi(t, a.Vals[0])
		case "max-backoff":
			cfg.Limits.MaxBackoff = scanDuration(t, d, "max-backoff")
		case "mode":
			cfg.Mode = map[string]Mode{"tools": ModeTools, "both": ModeBoth, "code": ModeCode}[a.Vals[0]]
		case "program-calls":
			cfg.Limits.ProgramCalls = atoi(t, a.Vals[0])
		case "decision-wait":
			cfg.DecisionWait = time.Duration(atoi(t, a.Vals[0])) * time.Second
		case "suspend":
			tools := a.Vals
			prev := cfg.Hooks.BeforeTool
			cfg.Hooks.BeforeTool = func(v View, c ToolCall) Gate {
				if slices.Contains(tools, c.Name) {
					return Gate{Verdict: Suspend, Ticket: Ticket{Reason: "approve " + c.Name}}
				}
				if prev != nil {
					return prev(v, c)
				}
				return Gate{}
			}
		case "block":
			tools := a.Vals
			prev := cfg.Hooks.BeforeTool
			cfg.Hooks.BeforeTool = func(v View, c ToolCall) Gate {
				if slices.Contains(tools, c.Name) {
					return Gate{Verdict: Block, Reason: c.Name + " is not allowed here"}
				}
				if prev != nil {
					return prev(v, c)
				}
				return Gate{}
			}
		case "stop-at":
			n := atoi(t, a.Vals[0])
			cfg.Hooks.BeforeInference = func(v View) HookAction {
				if v.Iteration >= n {
					return HookAction{Stop: &StopRequest{Code: "hook_stop", Detail: fmt.Sprintf("stopped before iteration %d", v.Iteration+1)}}
				}
				return HookAction{}
			}
		case "start-note":
			note := strings.Join(a.Vals, ",")
			cfg.Hooks.RunStart = func(View) HookAction {
				return HookAction{Messages: []Message{{Role: RoleSystem, Text: note}}}
			}
		case "emit-usage":
			cfg.Hooks.AfterInference = func(v View, r ModelResponse) HookAction {
				return HookAction{Emit: []Event{{Type: "usage", Detail: fmt.Sprintf("%d tokens", r.Usage.Total())}}}
			}
		case "stop-on-tool-error":
			cfg.Hooks.AfterTool = func(v View, c ToolCall, r ToolResult) HookAction {
				if r.Status == ToolError {
					return HookAction{Stop: &StopRequest{Code: "tool_error", Detail: c.ID + " failed"}}
				}
				return HookAction{}
			}
		case "end-note":
			cfg.Hooks.RunEnd = func(v View, term Termination) HookAction {
				return HookAction{Messages: []Message{{Role: RoleSystem, Text: "run ended " + term.Reason.String()}}}
			}
		default:
			d.Fatalf(t, "unknown config argument %q", a.Key)
		}
	}
	return cfg
}

// scanDuration reads a command argument written as a Go duration ("5s").
func scanDuration(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	var s string
	d.ScanArgs(t, key, &s)
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return v
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// scriptResponse reads a model response: "text: ...", "call: ID NAME ARGS",
// "usage: IN OUT", "finish: REASON".
func scriptResponse(t *testing.T, d *datadriven.TestData) *ModelResponse {
	r := &ModelResponse{Finish: FinishStop}
	for _, line := range lines(d.Input) {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "text":
			if r.Text != "" {
				r.Text += "\n"
			}
			r.Text += v
		case "call":
			f := strings.SplitN(v, " ", 3)
			c := ToolCall{ID: f[0], Name: f[1], Arguments: "{}"}
			if len(f) > 2 {
				c.Arguments = f[2]
			}
			r.ToolCalls = append(r.ToolCalls, c)
			r.Finish = FinishToolCalls
		case "usage":
			f := strings.Fields(v)
			r.Usage = Usage{InputTokens: int64(atoi(t, f[0])), OutputTokens: int64(atoi(t, f[1]))}
		case "finish":
			r.Finish = FinishReason(v)
		default:
			d.Fatalf(t, "unknown response line %q", line)
		}
	}
	return r
}

// scriptInjection reads "user: TEXT", "system: TEXT" and
// "decision: ID CALL resume MODE [PAYLOAD]" / "decision: ID CALL cancel".
func scriptInjection(t *testing.T, d *datadriven.TestData) ([]Message, []Decision) {
	var msgs []Message
	var decs []Decision
	for _, line := range lines(d.Input) {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "user":
			msgs = append(msgs, Message{Role: RoleUser, Text: v})
		case "system":
			msgs = append(msgs, Message{Role: RoleSystem, Text: v})
		case "assistant":
			msgs = append(msgs, Message{Role: RoleAssistant, Text: v})
		case "decision":
			f := append(strings.SplitN(v, " ", 5), "", "")
			dec := Decision{ID: f[0], CallID: f[1]}
			switch f[2] {
			case "cancel":
				dec.Action = CancelCall
			case "resume":
				dec.Action = Resume
				if f[3] != "" {
					dec.Mode = map[string]ResumeMode{"replay": ResumeReplay, "use-result": ResumeUseResult, "pass-to-tool": ResumePassToTool}[f[3]]
				}
				if len(f) > 6 {
					dec.Payload = f[4]
				}
			}
			decs = append(decs, dec)
		default:
			if d.Cmd == "checkpoint" || d.Cmd == "event" || d.Cmd == "new" || d.Cmd == "continue" {
				d.Fatalf(t, "unknown input line %q", line)
			}
		}
	}
	return msgs, decs
}

func describeEffect(e Effect) string {
	var b strings.Builder
	h := e.Head()
	switch e := e.(type) {
	case *Progress:
		b.WriteString("progress:\n")
		for _, msg := range e.Messages {
			fmt.Fprintf(&b, "  + %s\n", describeMessage(msg))
		}
		for _, ev := range e.Events {
			fmt.Fprintf(&b, "  ~ %s\n", describeEvent(ev))
		}
	case *Emit:
		fmt.Fprintf(&b, "emit: %s\n", describeEvent(e.Event))
	case *SyncTools:
		fmt.Fprintf(&b, "effect %d sync-tools key=%s hash=%s\n", h.ID, h.Key, h.Hash.Short())
	case *LLMCall:
		var tools []string
		for _, t := range e.Request.Tools {
			tools = append(tools, t.Name)
		}
		fmt.Fprintf(&b, "effect %d llm-call key=%s attempt=%d messages=%d tools=[%s] hash=%s\n",
			h.ID, h.Key, e.Attempt, len(e.Request.Messages), strings.Join(tools, ","), h.Hash.Short())
	case *ToolCalls:
		fmt.Fprintf(&b, "effect %d tool-calls key=%s hash=%s\n", h.ID, h.Key, h.Hash.Short())
		for _, c := range e.Calls {
			fmt.Fprintf(&b, "  call %s %s %s key=%s hash=%s", c.Call.ID, c.Call.Name, c.Call.Arguments, c.Key, c.Hash.Short())
			if c.Decision != nil {
				fmt.Fprintf(&b, " decision=%s/%s", c.Decision.ID, c.Decision.Mode)
				if c.Decision.Payload != "" {
					fmt.Fprintf(&b, "(%s)", c.Decision.Payload)
				}
			}
			b.WriteByte('\n')
		}
	case *ExecCode:
		fmt.Fprintf(&b, "effect %d exec-code %s key=%s known=%d hash=%s\n", h.ID, e.CallID, h.Key, len(e.Known), h.Hash.Short())
	case *ProgramCalls:
		fmt.Fprintf(&b, "effect %d program-calls %s key=%s hash=%s\n", h.ID, e.CallID, h.Key, h.Hash.Short())
		for _, c := range e.Calls {
			fmt.Fprintf(&b, "  #%d %s key=%s hash=%s", c.Call.Ordinal, describeProgramCall(c.Call), c.Key, c.Hash.Short())
			if c.Decision != nil {
				fmt.Fprintf(&b, " decision=%s/%s(%s)", c.Decision.ID, c.Decision.Mode, c.Decision.Payload)
			}
			b.WriteByte('\n')
		}
	case *Checkpoint:
		fmt.Fprintf(&b, "effect %d checkpoint %s key=%s hash=%s\n", h.ID, e.At, h.Key, h.Hash.Short())
	case *Sleep:
		fmt.Fprintf(&b, "effect %d sleep %s (%s) key=%s hash=%s\n", h.ID, e.Duration, e.Reason, h.Key, h.Hash.Short())
	case *AwaitEvent:
		fmt.Fprintf(&b, "effect %d await-event %s timeout=%s key=%s hash=%s\n", h.ID, e.Name, e.Timeout, h.Key, h.Hash.Short())
	case *Done:
		o := e.Outcome
		fmt.Fprintf(&b, "done: status=%s %s iterations=%d usage=%d/%d new-messages=%d\n",
			o.Status, o.Termination, o.Iterations, o.Usage.InputTokens, o.Usage.OutputTokens, len(o.Messages))
		for _, s := range o.Suspended {
			fmt.Fprintf(&b, "  suspended %s %s (%s)", s.Call.ID, s.Call.Name, s.Ticket.Reason)
			if p := s.Program; p != nil {
				fmt.Fprintf(&b, " program calls=%d waits=#%d", len(p.Calls), p.Waits-1)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func describeMessage(m Message) string {
	s := m.Role.String()
	if m.Role == RoleTool {
		s += "[" + m.CallID + " " + m.Name
		if m.Error {
			s += " error"
		}
		if m.Pending {
			s += " pending"
		}
		s += "]"
	}
	s += ": " + m.Text
	for _, c := range m.ToolCalls {
		s += fmt.Sprintf(" <call %s %s %s>", c.ID, c.Name, c.Arguments)
	}
	return s
}

func describeEvent(e Event) string {
	s := fmt.Sprintf("[%d] %s", e.Iteration, e.Type)
	if e.CallID != "" {
		s += " " + e.CallID
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

func describeState(m *Machine) string {
	var b strings.Builder
	st := &m.st
	fmt.Fprintf(&b, "status=%s iteration=%d failures=%d usage=%d/%d next-id=%d\n",
		st.Status, st.Iteration, st.Failures, st.Usage.InputTokens, st.Usage.OutputTokens, st.NextID)
	for _, c := range st.Calls {
		fmt.Fprintf(&b, "call %s %s: %s\n", c.Call.ID, c.Call.Name, c.Status)
	}
	if len(st.Decided) > 0 {
		fmt.Fprintf(&b, "decided: %s\n", strings.Join(st.Decided, ","))
	}
	return b.String()
}

// execResult reads what a program did next: "tool NAME ARGS", "llm ARGS"
// and "sleep ARGS" lines for its calls, numbered after the outstanding
// ExecCode's known ones (or from=N), or "end ok|error OUTPUT".
func (h *harness) execResult(d *datadriven.TestData) ExecResult {
	r := ExecResult{ID: h.id(d)}
	next := 0
	if e, ok := h.m.Next().(*ExecCode); ok {
		next = len(e.Known)
	}
	if d.HasArg("from") {
		d.ScanArgs(h.t, "from", &next)
	}
	for _, line := range lines(d.Input) {
		f := strings.SplitN(line, " ", 3)
		switch f[0] {
		case "end":
			r.End = &ProgramEnd{Failed: f[1] == "error"}
			if len(f) > 2 {
				r.End.Output = f[2]
			}
		case "tool":
			r.Calls = append(r.Calls, ProgramCall{Ordinal: next, Kind: ChildTool, Tool: f[1], Args: f[2]})
			next++
		case "llm", "sleep":
			c := ProgramCall{Ordinal: next, Kind: map[string]ChildKind{"llm": ChildModel, "sleep": ChildSleep}[f[0]]}
			c.Args = strings.TrimSpace(strings.TrimPrefix(line, f[0]))
			r.Calls = append(r.Calls, c)
			next++
		default:
			d.Fatalf(h.t, "unknown exec line %q", line)
		}
	}
	return r
}

// scriptOutcomes reads a program's outcomes: "ok VALUE", "error MESSAGE",
// "cancelled", "pending REASON".
func scriptOutcomes(d *datadriven.TestData) ProgramResults {
	r := ProgramResults{ID: 0}
	for _, line := range lines(d.Input) {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "ok":
			r.Outcomes = append(r.Outcomes, ProgramOutcome{Status: ChildOK, Value: v})
		case "error":
			r.Outcomes = append(r.Outcomes, ProgramOutcome{Status: ChildFailed, Error: v})
		case "cancelled":
			r.Outcomes = append(r.Outcomes, ProgramOutcome{Status: ChildCancelled})
		case "pending":
			r.Outcomes = append(r.Outcomes, ProgramOutcome{Status: ChildPending, Error: v})
		}
	}
	return r
}

func describeProgramCall(c ProgramCall) string {
	if c.Kind == ChildTool {
		return "tool " + c.Tool + " " + c.Args
	}
	return c.Kind.String() + " " + c.Args
}
