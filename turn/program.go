package turn

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// Programs: in ModeCode and ModeBoth the model may call ProgramTool with a
// program, which the driver runs (package codemode) and which makes calls
// of its own: tools, the model, sleeps. The machine mediates each of those
// calls as a child effect with its own replay key, derived from the
// program's origin key and the call's ordinal, so a driver journals and
// replays them as it does tool calls. A program's run is not kept: after a
// crash or a restore the driver runs it again from its start, and every
// call it makes answers from the outcomes the machine holds (ExecCode.Known)
// or from the journal.
//
// The exchange for one program call:
//
//	ExecCode{Known: outcomes so far} -> ExecResult{Calls} | ExecResult{End}
//	ProgramCalls{children}           -> ProgramResults{outcomes}
//	ExecCode{Known: one more batch}  -> ...
//
// A driver that keeps the program running between them feeds it the new
// outcomes; one that starts it again (after a crash) answers its first
// len(Known) calls from Known.

// ProgramTool is the tool whose one argument, "program", is a program. The
// driver offers it in its ToolsSynced answer, described with the tools a
// program may call.
const ProgramTool = "run_program"

// Mode says how a turn's model acts.
type Mode uint8

const (
	// ModeTools: the model calls tools. ProgramTool is an ordinary tool
	// name.
	ModeTools Mode = iota
	// ModeBoth: the model calls tools, and ProgramTool runs a program.
	ModeBoth
	// ModeCode: the model is offered ProgramTool alone; its programs call
	// the other tools.
	ModeCode
)

func (m Mode) String() string {
	switch m {
	case ModeTools:
		return "tools"
	case ModeBoth:
		return "both"
	case ModeCode:
		return "code"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// DefaultProgramCalls is Limits.ProgramCalls's default.
const DefaultProgramCalls = 1000

// ChildKind is what a program's call asks for.
type ChildKind uint8

const (
	// ChildTool calls the tool ProgramCall.Tool with ProgramCall.Args.
	ChildTool ChildKind = iota + 1
	// ChildModel calls the model with ProgramCall.Args ({"prompt": ...}).
	ChildModel
	// ChildSleep sleeps for ProgramCall.Args ({"seconds": ...}); its
	// record, once it ended, keeps a replay from sleeping again.
	ChildSleep
)

func (k ChildKind) String() string {
	switch k {
	case ChildTool:
		return "tool"
	case ChildModel:
		return "llm"
	case ChildSleep:
		return "sleep"
	}
	return fmt.Sprintf("child(%d)", uint8(k))
}

// ProgramCall is one call a program made, at its ordinal: its place in the
// order the program makes its calls, from 0.
type ProgramCall struct {
	Ordinal int       `msgpack:"o"`
	Kind    ChildKind `msgpack:"k"`
	Tool    string    `msgpack:"t,omitempty"`
	// Args is a JSON object.
	Args string `msgpack:"a,omitempty"`
}

// ChildStatus is how a program's call came back.
type ChildStatus uint8

const (
	ChildOK ChildStatus = iota + 1
	ChildFailed
	// ChildCancelled: a sibling in its fan-out stopped it.
	ChildCancelled
	// ChildPending: the call waits for a decision (a tool answered
	// pending); Error says for what. The program parks on it.
	ChildPending
)

// ProgramOutcome is what one call of a program came to: a JSON value when
// OK, an error message when failed.
type ProgramOutcome struct {
	Status ChildStatus `msgpack:"s"`
	Value  string      `msgpack:"v,omitempty"`
	Error  string      `msgpack:"e,omitempty"`
	// Usage is a model call's (llm): it counts toward the turn's.
	Usage *Usage `msgpack:"u,omitempty"`
}

// ProgramChild is a call with its outcome, nil while it is outstanding.
type ProgramChild struct {
	Call    ProgramCall     `msgpack:"c"`
	Outcome *ProgramOutcome `msgpack:"r,omitempty"`
}

// ProgramEnd is how a program ended, as the model reads it: the result of
// its ProgramTool call.
type ProgramEnd struct {
	Output string
	// Failed: the program failed (its error, a bound it passed).
	Failed bool
}

// ExecCode asks the driver to run the program of call CallID. Every
// ExecCode and ProgramCalls of one program has the id of its first. Its first
// len(Known) calls have the outcomes in Known; the driver answers with the
// calls it makes after them, or with its end. H.Key is the program's
// origin, the same for every ExecCode of one program, in this turn and in
// a later one that resumes it: a driver journals the program's end under
// it, so that a replay need not run the program at all.
type ExecCode struct {
	H       Head
	CallID  string
	Program string
	Known   []ProgramChild
}

// ChildCall is one call of ProgramCalls, with its own key and hash.
// Decision is set for a call that waited and runs again because a
// decision resumed its program (ResumeReplay, ResumePassToTool): its key
// then names the decision, so the call's first record, which says it
// waits, stays as it was.
type ChildCall struct {
	Call     ProgramCall
	Key      ReplayKey
	Hash     Hash
	Decision *Decision
}

// ProgramCalls asks for the calls a program made at once (several in a
// fan-out), each a durable effect of its own; the driver answers every one.
type ProgramCalls struct {
	H      Head
	CallID string
	Calls  []ChildCall
}

func (e *ExecCode) Kind() Kind     { return KindExecCode }
func (e *ProgramCalls) Kind() Kind { return KindProgramCalls }
func (e *ExecCode) Head() Head     { return e.H }
func (e *ProgramCalls) Head() Head { return e.H }
func (*ExecCode) isEffect()        {}
func (*ProgramCalls) isEffect()    {}

// ExecResult answers ExecCode: the calls the program made next (all of a
// fan-out at once), with ordinals following Known, or its End.
type ExecResult struct {
	ID    EffectID
	Calls []ProgramCall
	End   *ProgramEnd
}

// ProgramResults answers ProgramCalls: one outcome per call, in order.
type ProgramResults struct {
	ID       EffectID
	Outcomes []ProgramOutcome
}

func (r ExecResult) Answers() EffectID     { return r.ID }
func (r ProgramResults) Answers() EffectID { return r.ID }
func (ExecResult) isResult()               {}
func (ProgramResults) isResult()           {}

// progState is a program call's run so far. A program parks when a call
// it made waits for a decision: the call keeps no outcome, Waits names it,
// and the decision that resumes the program (Decision) answers it when the
// program, run again, makes its batch of calls again. Each run between
// parks (a segment) has an origin of its own, the key of its first
// ExecCode, in the turn that runs it: its calls and its end are journaled
// in that turn, and the calls of earlier segments answer from Children.
type progState struct {
	Origin   ReplayKey      `msgpack:"o"`
	Children []ProgramChild `msgpack:"k,omitempty"`
	// Batch is the ordinal of the first call of the last batch.
	Batch int `msgpack:"b,omitempty"`
	// Waits is the ordinal, plus one, of the call the program waits for.
	Waits    int       `msgpack:"w,omitempty"`
	Decision *Decision `msgpack:"d,omitempty"`
}

// ParkedProgram is a program call's run as a turn that ends with it
// suspended leaves it for the next (SuspendedCall.Program): the calls it
// made, with their outcomes but for the one it waits on.
type ParkedProgram struct {
	Calls []ProgramChild `msgpack:"k,omitempty"`
	Batch int            `msgpack:"b,omitempty"`
	Waits int            `msgpack:"w"`
}

func (p *progState) parked() *ParkedProgram {
	return &ParkedProgram{Calls: p.Children, Batch: p.Batch, Waits: p.Waits}
}

// known is the calls before the first without an outcome, or waiting.
func (p *progState) known() []ProgramChild {
	for i, ch := range p.Children {
		if ch.Outcome == nil || ch.Outcome.Status == ChildPending {
			return p.Children[:i:i]
		}
	}
	return p.Children
}

// ChildKey is the replay key of the call at ordinal of the program whose
// origin is origin.
func ChildKey(origin ReplayKey, ordinal int) ReplayKey {
	k := origin
	k.Kind = KindProgramCall
	k.Call = origin.Call + "#" + strconv.Itoa(ordinal)
	return k
}

// ChildHash is the request hash of a program's call.
func ChildHash(c ProgramCall) Hash { return canonicalHash(KindProgramCall, &c) }

func childDecisionHash(c ProgramCall, d *Decision) Hash {
	return canonicalHash(KindProgramCall, &struct {
		C ProgramCall
		D *Decision
	}{c, d})
}

// ProgramHash is the request hash of a program: what its end is recorded
// against.
func ProgramHash(program string) Hash { return canonicalHash(KindExecCode, program) }

// maxProgramCallID bounds a program call's id: its calls' ids add
// "#<ordinal>" to it, and "~<decision>" when a decision runs one again,
// and every id must fit a subject token (MaxIDBytes).
const maxProgramCallID = MaxIDBytes - 32

// checkProgramCall checks that a ProgramTool call can run.
func checkProgramCall(c ToolCall) error {
	if len(c.ID) > maxProgramCallID {
		return fmt.Errorf("a %s call's id is at most %d bytes, not %d", ProgramTool, maxProgramCallID, len(c.ID))
	}
	_, err := programSource(c.Arguments)
	return err
}

// decisionTag names a decision in a call's key, in 16 bytes whatever the
// decision's id.
func decisionTag(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}

// programSource reads a ProgramTool call's argument.
func programSource(args string) (string, error) {
	var a struct {
		Program *string `json:"program"`
	}
	if err := json.Unmarshal([]byte(args), &a); err != nil || a.Program == nil {
		return "", fmt.Errorf(`%s takes {"program": "<Starlark source>"}`, ProgramTool)
	}
	return *a.Program, nil
}

// isProgram says whether a call the model made runs a program.
func (m *Machine) isProgram(call ToolCall) bool {
	return m.cfg.Mode != ModeTools && call.Name == ProgramTool
}

// inOffer says whether the model was offered the tool: in ModeCode only
// ProgramTool, whose programs call the rest.
func (m *Machine) inOffer(name string) bool {
	if m.cfg.Mode == ModeCode {
		return name == ProgramTool && m.inCatalog(name)
	}
	return m.inCatalog(name)
}

// offered is the catalog as the model sees it.
func (m *Machine) offered() []ToolSpec {
	if m.cfg.Mode != ModeCode {
		return m.st.Tools
	}
	for i, t := range m.st.Tools {
		if t.Name == ProgramTool {
			return m.st.Tools[i : i+1 : i+1]
		}
	}
	return nil
}

// step makes the next effect of the running program outstanding under
// the id its first ExecCode took: a program takes one effect id however
// it ran, so the effects after it have the same ids whether it ran call
// by call or a replay found its end recorded.
func (m *Machine) step(p phase) {
	m.flushProgress()
	m.st.Phase = p
	m.out = m.build()
}

// nextProgram runs the first program call of the round that has not
// ended, or closes the round when none is left.
func (m *Machine) nextProgram() {
	st := &m.st
	for i := range st.Calls {
		c := &st.Calls[i]
		if c.Round != st.Round || c.Prog == nil || c.Status != CallRunning {
			continue
		}
		if c.Prog.Origin.Turn == "" {
			c.Prog.Origin = ReplayKey{Session: st.Session, Turn: st.Turn, Iteration: st.Iteration, Kind: KindExecCode,
				Effect: st.NextID, Call: c.Call.ID}
			m.event(EventProgramStarted, c.Call.ID, "")
		}
		st.ExecCall = c.Call.ID
		m.yield(phaseExec)
		return
	}
	st.ExecCall = ""
	m.closeRound()
}

func (m *Machine) execCall() *callState {
	if i := m.findCall(m.st.ExecCall); i >= 0 {
		return &m.st.Calls[i]
	}
	return nil
}

// checkExec validates an ExecResult against the running program.
func (m *Machine) checkExec(r ExecResult) error {
	if (r.End == nil) == (len(r.Calls) == 0) {
		return fmt.Errorf("%w: ExecResult needs exactly one of Calls and End", ErrInvalidResult)
	}
	p := m.execCall().Prog
	next := len(p.Children)
	if p.Decision != nil && len(r.Calls) > 0 && r.Calls[0].Ordinal == p.Batch {
		// A resumed program makes its waiting batch again.
		if len(r.Calls) != len(p.Children)-p.Batch {
			return fmt.Errorf("%w: the resumed program made %d calls where it waited on %d", ErrInvalidResult, len(r.Calls), len(p.Children)-p.Batch)
		}
		for i, c := range r.Calls {
			if old := p.Children[p.Batch+i].Call; c != old {
				return fmt.Errorf("%w: the resumed program made another call at %d than the one it waited on", ErrInvalidResult, old.Ordinal)
			}
		}
		return nil
	}
	for i, c := range r.Calls {
		if c.Ordinal != next+i {
			return fmt.Errorf("%w: program call %d has ordinal %d, want %d", ErrInvalidResult, i, c.Ordinal, next+i)
		}
		if c.Kind < ChildTool || c.Kind > ChildSleep {
			return fmt.Errorf("%w: program call %d has unknown kind %d", ErrInvalidResult, c.Ordinal, c.Kind)
		}
	}
	return nil
}

func (m *Machine) onExec(r ExecResult) {
	c := m.execCall()
	if r.End != nil {
		m.endProgram(c, *r.End)
		return
	}
	if p := c.Prog; p.Decision != nil && r.Calls[0].Ordinal == p.Batch {
		m.resumeBatch(c)
		return
	}
	if limit := m.cfg.Limits.ProgramCalls; len(c.Prog.Children)+len(r.Calls) > limit {
		m.endProgram(c, ProgramEnd{Failed: true, Output: fmt.Sprintf("the program made more than %d calls", limit)})
		return
	}
	c.Prog.Batch = len(c.Prog.Children)
	asked := 0
	for _, call := range r.Calls {
		id := ChildKey(c.Prog.Origin, call.Ordinal).Call
		ch := ProgramChild{Call: call, Outcome: m.gateChild(call, id)}
		if ch.Outcome == nil {
			asked++
			m.event(EventProgramCall, id, describeChild(call))
		}
		c.Prog.Children = append(c.Prog.Children, ch)
	}
	if asked == 0 {
		m.parkOrGo(c)
		return
	}
	m.step(phaseChildren)
}

// gateChild gates a program's tool call as the model's are: a tool not in
// the catalog (or the program tool) fails, and BeforeTool may block it
// (it fails) or suspend it (it waits, and the program parks on it). It
// returns the outcome that stands in for the call, or nil to run it.
func (m *Machine) gateChild(c ProgramCall, id string) *ProgramOutcome {
	if c.Kind != ChildTool {
		return nil
	}
	if c.Tool == ProgramTool || !m.inCatalog(c.Tool) {
		why := fmt.Sprintf("unknown tool %q", c.Tool)
		m.event(EventProgramRefused, id, why)
		return &ProgramOutcome{Status: ChildFailed, Error: why}
	}
	h := m.cfg.Hooks.BeforeTool
	if h == nil {
		return nil
	}
	switch g := h(m.view(), ToolCall{ID: id, Name: c.Tool, Arguments: c.Args}); g.Verdict {
	case Block:
		m.event(EventProgramRefused, id, g.Reason)
		return &ProgramOutcome{Status: ChildFailed, Error: "blocked: " + g.Reason}
	case Suspend:
		m.event(EventProgramCall, id, describeChild(c)+", suspended: "+g.Ticket.Reason)
		return &ProgramOutcome{Status: ChildPending, Error: g.Ticket.Reason}
	}
	return nil
}

func describeChild(c ProgramCall) string {
	if c.Kind == ChildTool {
		return c.Tool
	}
	return c.Kind.String()
}

// checkChildren validates a ProgramResults against the outstanding calls.
func (m *Machine) checkChildren(r ProgramResults) error {
	want := 0
	for _, ch := range m.execCall().Prog.Children {
		if ch.Outcome == nil {
			want++
		}
	}
	if len(r.Outcomes) != want {
		return fmt.Errorf("%w: %d outcomes for %d program calls", ErrInvalidResult, len(r.Outcomes), want)
	}
	for i, o := range r.Outcomes {
		if o.Status < ChildOK || o.Status > ChildPending {
			return fmt.Errorf("%w: program outcome %d has unknown status %d", ErrInvalidResult, i, o.Status)
		}
	}
	return nil
}

func (m *Machine) onChildren(r ProgramResults) {
	c := m.execCall()
	p := c.Prog
	j := 0
	spent := false
	for i := range p.Children {
		ch := &p.Children[i]
		if ch.Outcome != nil {
			continue
		}
		o := r.Outcomes[j]
		j++
		m.event(EventProgramOutcome, ChildKey(p.Origin, ch.Call.Ordinal).Call, o.Status.String())
		if p.Waits == i+1 {
			p.Waits, p.Decision = 0, nil // the decided call ran again
		}
		if o.Usage != nil {
			m.st.Usage = m.st.Usage.Add(*o.Usage)
			spent = true
		}
		ch.Outcome = &o
	}
	// Only the program's own model calls can spend the budget: the turn's
	// stop rule sees the rest before its next model call, as for tools.
	if b := m.cfg.Limits.TokenBudget; spent && b > 0 && m.st.Usage.Total() >= b {
		m.endProgram(c, ProgramEnd{Failed: true, Output: fmt.Sprintf("the turn's token budget is spent: %d of %d tokens", m.st.Usage.Total(), b)})
		return
	}
	m.parkOrGo(c)
}

// parkOrGo parks the program on the first of its calls that waits for a
// decision, or runs it on. A call that waits keeps its pending outcome: it
// runs no more, and each such call's decision comes in turn.
func (m *Machine) parkOrGo(c *callState) {
	p := c.Prog
	for i, ch := range p.Children {
		if ch.Outcome == nil || ch.Outcome.Status != ChildPending {
			continue
		}
		// The program call waits for what its call waits for: the ticket
		// is that call's, so a node that wakes built-in waits wakes this
		// one (SuspendedCall.WaitingTool). The run that resumes it is a
		// segment of its own.
		p.Waits, p.Decision, p.Origin = i+1, nil, ReplayKey{}
		c.Status, c.Ticket = CallSuspended, Ticket{Reason: ch.Outcome.Error}
		m.event(EventToolSuspended, c.Call.ID, ChildKey(ReplayKey{Call: c.Call.ID}, i).Call+": "+c.Ticket.Reason)
		m.nextProgram()
		return
	}
	m.step(phaseExec)
}

// resumeBatch takes a resumed program's waiting batch again: calls with
// outcomes keep them, the call that waited takes its decision's, or runs
// again with it.
func (m *Machine) resumeBatch(c *callState) {
	p := c.Prog
	ch := &p.Children[p.Waits-1]
	id := ChildKey(p.Origin, ch.Call.Ordinal).Call
	d := p.Decision
	ch.Outcome = nil // it waits no more
	switch {
	case d.Action == CancelCall:
		ch.Outcome = &ProgramOutcome{Status: ChildFailed, Error: "cancelled by decision " + d.ID}
	case d.Mode == ResumeUseResult:
		ch.Outcome = &ProgramOutcome{Status: ChildOK, Value: JSONValue(d.Payload)}
	}
	if ch.Outcome != nil {
		m.event(EventProgramOutcome, id, ch.Outcome.Status.String())
		p.Waits, p.Decision = 0, nil
		m.parkOrGo(c)
		return
	}
	m.event(EventProgramCall, id, "again, decision "+d.ID)
	m.step(phaseChildren)
}

// JSONValue is text as a program's value: its JSON when it is JSON (a
// tool's output, a decision's payload), else the text as a string.
func JSONValue(s string) string {
	if json.Valid([]byte(s)) {
		return s
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func (s ChildStatus) String() string {
	switch s {
	case ChildOK:
		return "ok"
	case ChildFailed:
		return "error"
	case ChildCancelled:
		return "cancelled"
	case ChildPending:
		return "pending"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// endProgram makes a program's end its call's result, and runs the next.
func (m *Machine) endProgram(c *callState, end ProgramEnd) {
	res := ToolResult{CallID: c.Call.ID, Status: ToolOK, Output: end.Output}
	c.Status = CallSucceeded
	if end.Failed {
		res.Status, c.Status = ToolError, CallFailed
	}
	c.Result, c.Prog = &res, nil
	m.event(EventProgramEnded, c.Call.ID, res.Status.String())
	m.nextProgram()
}

func (s ToolStatus) String() string {
	switch s {
	case ToolOK:
		return "ok"
	case ToolError:
		return "error"
	case ToolPending:
		return "pending"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// buildExec and buildChildren make the outstanding program effect.
func (m *Machine) buildExec() Effect {
	c := m.execCall()
	src, _ := programSource(c.Call.Arguments) // checked as the call began
	h := Head{ID: m.st.Out, Key: c.Prog.Origin, Hash: ProgramHash(src)}
	return &ExecCode{H: h, CallID: c.Call.ID, Program: src, Known: c.Prog.known()}
}

func (m *Machine) buildChildren() Effect {
	st := &m.st
	c := m.execCall()
	e := &ProgramCalls{CallID: c.Call.ID}
	hashes := make([]Hash, 0, 4)
	for _, ch := range c.Prog.Children {
		if ch.Outcome != nil {
			continue
		}
		cc := ChildCall{Call: ch.Call, Key: ChildKey(c.Prog.Origin, ch.Call.Ordinal), Hash: ChildHash(ch.Call)}
		if p := c.Prog; p.Decision != nil && p.Waits == ch.Call.Ordinal+1 {
			cc.Decision = p.Decision
			cc.Key.Call += "~" + decisionTag(p.Decision.ID)
			cc.Hash = childDecisionHash(ch.Call, p.Decision)
		}
		e.Calls = append(e.Calls, cc)
		hashes = append(hashes, cc.Hash)
	}
	key := e.Calls[0].Key
	key.Kind = KindProgramCalls
	e.H = Head{ID: st.Out, Key: key, Hash: callsHash(hashes)}
	return e
}

// checkProgram verifies a call's program state.
func (c *callState) checkProgram() error {
	p := c.Prog
	if p == nil {
		return nil
	}
	if c.Status != CallRunning && c.Status != CallSuspended && c.Status != CallResuming || c.Exec {
		return fmt.Errorf("call %q keeps a program's run while %s", c.Call.ID, c.Status)
	}
	if p.Waits < 0 || p.Waits > len(p.Children) || p.Batch < 0 || p.Batch > len(p.Children) ||
		(p.Waits != 0) != (c.Status == CallSuspended || p.Decision != nil) || p.Waits != 0 && p.Waits <= p.Batch ||
		p.Waits != 0 && p.Decision == nil && (p.Children[p.Waits-1].Outcome == nil || p.Children[p.Waits-1].Outcome.Status != ChildPending) {
		return fmt.Errorf("program %q waits on %d of %d calls (batch %d)", c.Call.ID, p.Waits, len(p.Children), p.Batch)
	}
	if len(p.Children) > maxCount {
		return fmt.Errorf("program %q made too many calls", c.Call.ID)
	}
	for i, ch := range p.Children {
		switch {
		case ch.Call.Ordinal != i || ch.Call.Kind < ChildTool || ch.Call.Kind > ChildSleep:
			return fmt.Errorf("program %q has call %d with ordinal %d and kind %d", c.Call.ID, i, ch.Call.Ordinal, ch.Call.Kind)
		case ch.Outcome == nil && i < p.Batch:
			return fmt.Errorf("program %q has call %d without an outcome before its last batch", c.Call.ID, i)
		case ch.Outcome != nil && (ch.Outcome.Status < ChildOK || ch.Outcome.Status > ChildPending):
			return fmt.Errorf("program %q has call %d with outcome status %d", c.Call.ID, i, ch.Outcome.Status)
		}
	}
	if p.Origin.Turn != "" && (p.Origin.Kind != KindExecCode || p.Origin.Call != c.Call.ID) || p.Origin.Turn != "" && c.Status == CallSuspended {
		return fmt.Errorf("program %q has origin %s", c.Call.ID, p.Origin)
	}
	return nil
}

// checkExec verifies that a program's effect is outstanding only with its
// program call running.
func (st *state) checkExec() error {
	if st.Phase != phaseExec && st.Phase != phaseChildren {
		if st.ExecCall != "" {
			return fmt.Errorf("program %q runs outside its phases", st.ExecCall)
		}
		return nil
	}
	var c *callState
	for i := range st.Calls {
		if st.Calls[i].Call.ID == st.ExecCall {
			c = &st.Calls[i]
		}
	}
	if c == nil || c.Prog == nil || c.Status != CallRunning || c.Round != st.Round || c.Prog.Origin.Turn == "" {
		return fmt.Errorf("no running program call %q", st.ExecCall)
	}
	if err := checkProgramCall(c.Call); err != nil {
		return fmt.Errorf("program call %q: %v", st.ExecCall, err)
	}
	open := 0
	for _, ch := range c.Prog.Children {
		if ch.Outcome == nil {
			open++
		}
	}
	if st.Phase == phaseChildren && open == 0 || st.Phase == phaseExec && open > 0 && c.Prog.Decision == nil {
		return fmt.Errorf("program %q has %d outstanding calls in phase %d", st.ExecCall, open, st.Phase)
	}
	return nil
}

// WaitingTool is the tool whose ticket a suspended call holds: its own, or
// for a parked program the tool of the call it waits on.
func (sc SuspendedCall) WaitingTool() string {
	if p := sc.Program; p != nil && p.Waits > 0 && p.Waits <= len(p.Calls) && p.Calls[p.Waits-1].Call.Kind == ChildTool {
		return p.Calls[p.Waits-1].Call.Tool
	}
	return sc.Call.Name
}

// WaitingID names what a suspended call waits on: the call, or for a parked
// program the call it waits on (its id, # and the call's ordinal). Each
// call a program waits on in turn is woken under an id of its own.
func (sc SuspendedCall) WaitingID() string {
	if p := sc.Program; p != nil && p.Waits > 0 {
		return ChildKey(ReplayKey{Call: sc.Call.ID}, p.Waits-1).Call
	}
	return sc.Call.ID
}
