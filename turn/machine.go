package turn

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors returned by Deliver and Restore. Each is wrapped with detail; match
// with errors.Is.
var (
	// ErrUnknownEffect: the result answers an effect that is not outstanding.
	ErrUnknownEffect = errors.New("turn: result for an effect that is not outstanding")
	// ErrUnexpectedResult: the result's type does not answer the outstanding effect.
	ErrUnexpectedResult = errors.New("turn: result does not match the outstanding effect")
	// ErrInvalidResult: the result is malformed (missing ids, unknown calls, bad enums).
	ErrInvalidResult = errors.New("turn: invalid result")
	// ErrFinished: the turn has ended; nothing more is accepted.
	ErrFinished = errors.New("turn: turn has finished")
	// ErrInvalidStart: the Start or Config cannot build a turn.
	ErrInvalidStart = errors.New("turn: invalid start")
)

// phase is what the machine waits for.
type phase uint8

const (
	phaseSync phase = iota + 1
	phaseLLM
	phaseSleep
	phaseTools
	phaseCheckpoint
	phaseAwait
	phaseExec
	phaseChildren
	phaseDone
)

var wantResult = [...]string{phaseSync: "ToolsSynced", phaseLLM: "LLMResult", phaseSleep: "SleepDone",
	phaseTools: "ToolResults", phaseCheckpoint: "CheckpointResult", phaseAwait: "EventResult",
	phaseExec: "ExecResult", phaseChildren: "ProgramResults", phaseDone: "nothing"}

// callState tracks one tool call through its lifecycle.
type callState struct {
	Call      ToolCall   `msgpack:"c"`
	Status    CallStatus `msgpack:"s"`
	Iteration int        `msgpack:"n"`
	// Round is the tool round the call last took part in; Exec says whether
	// it is part of that round's ToolCalls batch (blocked and gate-suspended
	// calls are not).
	Round    int         `msgpack:"o"`
	Exec     bool        `msgpack:"x,omitempty"`
	Ticket   Ticket      `msgpack:"t"`
	Decision *Decision   `msgpack:"d,omitempty"`
	Result   *ToolResult `msgpack:"r,omitempty"`
	// Prog is a program call's run while it has not ended.
	Prog *progState `msgpack:"pg,omitempty"`
}

// queued is a fire-and-forget effect not yet taken by Next.
type queued struct {
	Kind     Kind      `msgpack:"k"`
	Messages []Message `msgpack:"m,omitempty"`
	Events   []Event   `msgpack:"e,omitempty"`
}

// state is the machine's whole serializable state. The outstanding effect is
// rebuilt from it, so a restored machine yields byte-identical requests.
type state struct {
	Session string `msgpack:"sid"`
	Turn    string `msgpack:"tid"`

	Phase    phase          `msgpack:"ph"`
	Out      EffectID       `msgpack:"out"`
	OutIter  int            `msgpack:"oit"`
	Attempt  int            `msgpack:"att"`
	Request  *ModelRequest  `msgpack:"req,omitempty"`
	At       CheckpointKind `msgpack:"at,omitempty"`
	SleepFor time.Duration  `msgpack:"slp,omitempty"`
	AwaitFor time.Duration  `msgpack:"awt,omitempty"`
	NextID   EffectID       `msgpack:"nid"`

	Iteration  int       `msgpack:"it"`
	Round      int       `msgpack:"rnd"`
	Messages   []Message `msgpack:"msg"`
	HistoryLen int       `msgpack:"hl"`
	// HistoryDigest is the Digest of the history's messages.
	HistoryDigest Digest      `msgpack:"hd"`
	Tools         []ToolSpec  `msgpack:"tools"`
	Calls         []callState `msgpack:"calls"`
	// ExecCall is the program call whose effects are outstanding.
	ExecCall   string     `msgpack:"exc,omitempty"`
	Decided    []string   `msgpack:"dec"`
	StartDecs  []Decision `msgpack:"sdec"`
	Events     []Event    `msgpack:"ev"`
	SentMsgs   int        `msgpack:"sm"`
	SentEvents int        `msgpack:"se"`
	Queue      []queued   `msgpack:"q"`

	Usage       Usage       `msgpack:"use"`
	Failures    int         `msgpack:"fail"`
	Grace       bool        `msgpack:"grace"`
	Fresh       int         `msgpack:"fresh"`
	WaitExpired bool        `msgpack:"wexp"`
	Status      RunStatus   `msgpack:"st"`
	Term        Termination `msgpack:"term"`
}

// Machine is one turn's state machine. It is a plain value: no goroutines,
// clock or IO. See the package documentation for the driver's duties.
type Machine struct {
	cfg Config
	st  state
	out Effect
	// buf holds the system prompt's slot and then st.Messages, while
	// st.Messages still lives in it: a model request is a slice of buf,
	// not a copy of the conversation (requestMessages).
	buf []Message
	// own is the digest of the history followed by the first ownN of the
	// turn's own messages, as the last model request's hash extended it:
	// the machine only appends to the conversation, so the next request
	// extends it by what came since, not by the whole turn again.
	own  Digest
	ownN int
	// headState is a sha256 state after the kind and the request without
	// messages (headHash), for headTools and headModel.
	headState []byte
	headTools []ToolSpec
	headModel string
}

// New builds the machine for a fresh turn. The first Next yields SyncTools.
func New(cfg Config, s Start) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidStart, err)
	}
	if err := validateStart(s); err != nil {
		return nil, err
	}
	m := &Machine{cfg: cfg.withDefaults()}
	st := &m.st
	st.Session, st.Turn = s.Session, s.Turn
	st.NextID = 1
	st.Status = StatusRunning
	if f := s.Frame; len(f) == 1+len(s.History) && (len(s.History) == 0 || &f[1] == &s.History[0]) {
		f[0] = Message{Role: RoleSystem, Text: m.cfg.System}
		m.buf, st.Messages = f, f[1:]
	} else {
		m.layout(s.History)
	}
	st.HistoryLen = len(s.History)
	if s.HistoryDigest != nil {
		st.HistoryDigest = *s.HistoryDigest
	} else {
		st.HistoryDigest = Digest{}.Extend(s.History...)
	}
	st.SentMsgs = st.HistoryLen
	for _, sc := range s.Suspended {
		c := callState{Call: sc.Call, Status: CallSuspended, Ticket: sc.Ticket, Iteration: sc.Iteration}
		if p := sc.Program; p != nil {
			c.Prog = &progState{Children: p.Calls, Batch: p.Batch, Waits: p.Waits}
		}
		st.Calls = append(st.Calls, c)
	}
	if len(st.Calls) > 0 {
		st.Status = StatusWaiting
	}
	st.StartDecs = slices.Clone(s.Input.Decisions)
	m.event(EventRunStarted, "", "")
	m.appendMessages(s.Input.Messages)
	if act := m.runHook(m.cfg.Hooks.RunStart); act != nil {
		m.finish(Termination{Reason: BehaviorRequested, Code: act.Code, Detail: act.Detail})
		return m, nil
	}
	m.yield(phaseSync)
	return m, nil
}

func validateStart(s Start) error {
	if s.Session == "" || s.Turn == "" {
		return fmt.Errorf("%w: session and turn ids are required", ErrInvalidStart)
	}
	for i := 0; s.HistoryDigest == nil && i < len(s.History); i++ {
		if !s.History[i].Role.valid() {
			return fmt.Errorf("%w: history message %d has no valid role", ErrInvalidStart, i)
		}
	}
	if err := validateMessages(s.Input.Messages); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidStart, err)
	}
	if err := validateDecisions(s.Input.Decisions); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidStart, err)
	}
	seen := map[string]bool{}
	for _, sc := range s.Suspended {
		if sc.Call.ID == "" || seen[sc.Call.ID] {
			return fmt.Errorf("%w: suspended call id %q is empty or repeated", ErrInvalidStart, sc.Call.ID)
		}
		seen[sc.Call.ID] = true
		if p := sc.Program; p != nil {
			c := callState{Call: sc.Call, Status: CallSuspended, Prog: &progState{Children: p.Calls, Batch: p.Batch, Waits: p.Waits}}
			if err := c.checkProgram(); err != nil {
				return fmt.Errorf("%w: suspended program %q: %v", ErrInvalidStart, sc.Call.ID, err)
			}
		}
	}
	return nil
}

// Next returns the next effect for the driver: queued fire-and-forget effects
// first (each returned once), then the outstanding effect (returned again until
// it is answered), then Done for ever. The returned value must not be modified.
func (m *Machine) Next() Effect {
	if len(m.st.Queue) > 0 {
		q := m.st.Queue[0]
		m.st.Queue = m.st.Queue[1:]
		if q.Kind == KindEmit && len(q.Events) == 1 {
			return &Emit{Event: q.Events[0]}
		}
		return &Progress{Messages: q.Messages, Events: q.Events}
	}
	return m.out
}

// Status is the run's coarse status.
func (m *Machine) Status() RunStatus { return m.st.Status }

// Termination says why the turn ended; the zero value while it runs.
func (m *Machine) Termination() Termination { return m.st.Term }

// Messages is the whole conversation so far, history included.
func (m *Machine) Messages() []Message { return m.st.Messages }

// Events is every event recorded in this turn.
func (m *Machine) Events() []Event { return m.st.Events }

// Usage is the tokens used in this turn.
func (m *Machine) Usage() Usage { return m.st.Usage }

// Suspended lists the calls waiting on a decision. A driver checks decisions
// against it at ingress to refuse those for unknown calls.
func (m *Machine) Suspended() []SuspendedCall {
	var out []SuspendedCall
	for _, c := range m.st.Calls {
		if c.Status == CallSuspended {
			sc := SuspendedCall{Call: c.Call, Ticket: c.Ticket, Iteration: c.Iteration}
			if c.Prog != nil {
				sc.Program = c.Prog.parked()
			}
			out = append(out, sc)
		}
	}
	return out
}

// CallStatus returns the status of a known call.
func (m *Machine) CallStatus(callID string) (CallStatus, bool) {
	if i := m.findCall(callID); i >= 0 {
		return m.st.Calls[i].Status, true
	}
	return 0, false
}

// Deliver feeds the answer to the outstanding effect. A result for another
// id, of the wrong type, or malformed is refused with an error and changes
// nothing.
func (m *Machine) Deliver(r Result) error {
	st := &m.st
	if st.Phase == phaseDone {
		return ErrFinished
	}
	if r == nil {
		return fmt.Errorf("%w: nil result", ErrInvalidResult)
	}
	if r.Answers() != st.Out {
		return fmt.Errorf("%w: got id %d, outstanding is %d", ErrUnknownEffect, r.Answers(), st.Out)
	}
	wrong := func() error {
		return fmt.Errorf("%w: effect %d waits for %s, got %T", ErrUnexpectedResult, st.Out, wantResult[st.Phase], r)
	}
	switch r := r.(type) {
	case Cancel:
		m.cancel(r.Reason)
	case ToolsSynced:
		if st.Phase != phaseSync {
			return wrong()
		}
		if err := validateCatalog(r.Tools); err != nil {
			return err
		}
		m.onSynced(r)
	case LLMResult:
		if st.Phase != phaseLLM {
			return wrong()
		}
		if (r.Response == nil) == (r.Err == nil) {
			return fmt.Errorf("%w: LLMResult needs exactly one of Response and Err", ErrInvalidResult)
		}
		m.onLLM(r)
	case SleepDone:
		if st.Phase != phaseSleep {
			return wrong()
		}
		st.Attempt++
		m.yield(phaseLLM)
	case ToolResults:
		if st.Phase != phaseTools {
			return wrong()
		}
		fresh, err := m.checkToolResults(r)
		if err != nil {
			return err
		}
		m.onToolResults(fresh)
	case ExecResult:
		if st.Phase != phaseExec {
			return wrong()
		}
		if err := m.checkExec(r); err != nil {
			return err
		}
		m.onExec(r)
	case ProgramResults:
		if st.Phase != phaseChildren {
			return wrong()
		}
		if err := m.checkChildren(r); err != nil {
			return err
		}
		m.onChildren(r)
	case CheckpointResult:
		if st.Phase != phaseCheckpoint {
			return wrong()
		}
		if err := validateInjection(r.Messages, r.Decisions); err != nil {
			return err
		}
		if !m.gate(r.Messages, r.Decisions) {
			m.continueRun(st.At == BeforeFinish)
		}
	case EventResult:
		if st.Phase != phaseAwait {
			return wrong()
		}
		if err := validateInjection(r.Messages, r.Decisions); err != nil {
			return err
		}
		if r.TimedOut {
			st.WaitExpired = true
		}
		if !m.gate(r.Messages, r.Decisions) {
			m.continueRun(false)
		}
	default:
		return fmt.Errorf("%w: unknown result type %T", ErrUnexpectedResult, r)
	}
	return nil
}

func validateCatalog(tools []ToolSpec) error {
	seen := make(map[string]bool, len(tools))
	for _, t := range tools {
		if t.Name == "" || seen[t.Name] {
			return fmt.Errorf("%w: tool name %q is empty or repeated", ErrInvalidResult, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

func validateMessages(msgs []Message) error {
	for i, msg := range msgs {
		if msg.Role != RoleUser && msg.Role != RoleSystem {
			return fmt.Errorf("injected message %d has role %s; only user and system messages can be injected", i, msg.Role)
		}
	}
	return nil
}

func validateDecisions(ds []Decision) error {
	for _, d := range ds {
		if d.ID == "" || d.CallID == "" {
			return fmt.Errorf("decision needs an id and a call id (got %q, %q)", d.ID, d.CallID)
		}
		switch {
		case d.Action == CancelCall:
		case d.Action == Resume && d.Mode >= ResumeReplay && d.Mode <= ResumePassToTool:
		default:
			return fmt.Errorf("decision %q has an unknown action %d or resume mode %d", d.ID, d.Action, d.Mode)
		}
	}
	return nil
}

func validateInjection(msgs []Message, ds []Decision) error {
	if err := validateMessages(msgs); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidResult, err)
	}
	if err := validateDecisions(ds); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidResult, err)
	}
	return nil
}

func (m *Machine) onSynced(r ToolsSynced) {
	st := &m.st
	st.Tools = slices.Clone(r.Tools)
	decs := st.StartDecs
	st.StartDecs = nil
	if !m.gate(nil, decs) {
		m.continueRun(false)
	}
}

// continueRun decides, at a safe boundary, whether to infer again, wait for
// decisions, or finish. atFinish is set when the model has just answered
// without tool calls.
func (m *Machine) continueRun(atFinish bool) {
	st := &m.st
	suspended := m.countSuspended()
	if st.Status == StatusWaiting {
		if suspended > 0 {
			m.park()
			return
		}
		st.Status = StatusRunning
		m.event(EventRunResumed, "", "")
		m.nextIteration()
		return
	}
	switch {
	case suspended > 0 && st.Fresh == 0:
		st.Status = StatusWaiting
		m.event(EventRunWaiting, "", fmt.Sprintf("%d call(s) suspended", suspended))
		m.park()
	case atFinish && st.Fresh == 0:
		m.finish(Termination{Reason: NaturalEnd})
	default:
		m.nextIteration()
	}
}

// park waits for decisions while the run is Waiting: durably for up to
// DecisionWait, or by ending the turn Suspended.
func (m *Machine) park() {
	if m.cfg.DecisionWait > 0 && !m.st.WaitExpired {
		m.st.AwaitFor = m.cfg.DecisionWait
		m.yield(phaseAwait)
		return
	}
	m.finish(Termination{Reason: Suspended})
}

// nextIteration applies the stop rules, then asks for the next inference.
func (m *Machine) nextIteration() {
	st := &m.st
	l := m.cfg.Limits
	if l.MaxToolFailures > 0 && st.Failures >= l.MaxToolFailures {
		m.finish(Termination{Reason: Stopped, Code: CodeToolFailures,
			Detail: fmt.Sprintf("%d tool calls failed in a row (limit %d)", st.Failures, l.MaxToolFailures)})
		return
	}
	if l.TokenBudget > 0 && st.Usage.Total() >= l.TokenBudget {
		m.finish(Termination{Reason: Stopped, Code: CodeTokenBudget,
			Detail: fmt.Sprintf("used %d of %d tokens", st.Usage.Total(), l.TokenBudget)})
		return
	}
	if st.Iteration >= l.MaxIterations {
		st.Grace = true
		m.event(EventGraceIteration, "", fmt.Sprintf("limit of %d iterations reached", l.MaxIterations))
		m.appendMessages([]Message{{Role: RoleUser, Text: m.cfg.GracePrompt}})
	}
	if act := m.runHook(m.cfg.Hooks.BeforeInference); act != nil {
		m.finish(Termination{Reason: BehaviorRequested, Code: act.Code, Detail: act.Detail})
		return
	}
	st.Iteration++
	st.Attempt = 1
	st.Fresh = 0
	req := ModelRequest{Model: m.cfg.Model, Sampling: m.cfg.Sampling}
	req.Messages = m.requestMessages()
	if !st.Grace {
		req.Tools = m.offered()
	}
	st.Request = &req
	m.yield(phaseLLM)
}

// layout copies msgs into a new buf after the system prompt's slot, with
// room for the turn's messages, and makes them the conversation.
func (m *Machine) layout(msgs []Message) {
	buf := make([]Message, 1+len(msgs), 1+len(msgs)+16+len(msgs)/4)
	buf[0] = Message{Role: RoleSystem, Text: m.cfg.System}
	copy(buf[1:], msgs)
	m.buf, m.st.Messages = buf, buf[1:]
}

// requestMessages is the system prompt (when there is one) and the
// conversation, as a slice of buf capped at its end: the machine only
// appends to the conversation, past the request's end, so the request
// needs no copy of a history however long. When an append moved the
// conversation out of buf, it is laid out again.
func (m *Machine) requestMessages() []Message {
	n := len(m.st.Messages)
	if n == 0 || cap(m.buf) < 1+n || &m.buf[1:cap(m.buf)][0] != &m.st.Messages[0] {
		m.layout(m.st.Messages)
	}
	req := m.buf[: 1+n : 1+n]
	if m.cfg.System == "" {
		return req[1:]
	}
	return req
}

func (m *Machine) onLLM(r LLMResult) {
	st := &m.st
	if r.Err != nil {
		if r.Err.Retryable && st.Attempt < m.cfg.Limits.MaxAttempts {
			detail := fmt.Sprintf("attempt %d: %s", st.Attempt, r.Err.String())
			if r.Err.RetryAfter > 0 {
				detail += fmt.Sprintf(" (retry after %v)", r.Err.RetryAfter)
			}
			m.event(EventLLMRetry, "", detail)
			st.SleepFor = m.retrySleep(r.Err)
			m.yield(phaseSleep)
			return
		}
		m.finish(Termination{Reason: Error, Code: CodeProviderError,
			Detail: fmt.Sprintf("after %d attempt(s): %s", st.Attempt, r.Err.String())})
		return
	}
	resp := *r.Response
	st.Request = nil
	st.Usage = st.Usage.Add(resp.Usage)
	var stop *StopRequest
	if h := m.cfg.Hooks.AfterInference; h != nil {
		act := h(m.view(), resp)
		m.emit(act.Emit)
		stop = act.Stop
	}
	textOnly := Message{Role: RoleAssistant, Text: resp.Text}
	if err := m.checkToolCalls(resp.ToolCalls); err != nil {
		m.appendMessages([]Message{textOnly})
		m.finish(Termination{Reason: Error, Code: CodeInvalidResponse, Detail: err.Error()})
		return
	}
	switch {
	case stop != nil:
		m.appendMessages([]Message{textOnly})
		m.finish(Termination{Reason: BehaviorRequested, Code: stop.Code, Detail: stop.Detail})
	case st.Grace:
		m.appendMessages([]Message{textOnly})
		m.finish(Termination{Reason: Stopped, Code: CodeMaxIterations,
			Detail: fmt.Sprintf("answered in the grace iteration after %d iterations", m.cfg.Limits.MaxIterations)})
	case len(resp.ToolCalls) == 0:
		m.appendMessages([]Message{textOnly})
		st.At = BeforeFinish
		m.yield(phaseCheckpoint)
	default:
		m.appendMessages([]Message{{Role: RoleAssistant, Text: resp.Text, ToolCalls: slices.Clone(resp.ToolCalls)}})
		m.startRound(resp.ToolCalls)
	}
}

// retrySleep is the wait before the next attempt: the backoff, or the
// provider's Retry-After when that is longer, within [0, MaxBackoff]. It
// reads only config and the journaled error, so a replay sleeps the same.
func (m *Machine) retrySleep(e *CallError) time.Duration {
	l := m.cfg.Limits
	d := max(l.Backoff(m.st.Attempt), e.RetryAfter)
	return max(0, min(d, l.MaxBackoff))
}

// String is the error as logs and the model read it: its code, then its
// message.
func (e *CallError) String() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// gate applies injected messages and decisions: the resume gate at every
// safe boundary. It returns true if it yielded a batch to re-run resumed
// calls.
func (m *Machine) gate(msgs []Message, decisions []Decision) bool {
	st := &m.st
	if len(msgs) > 0 {
		m.event(EventMessagesInjected, "", fmt.Sprintf("%d message(s)", len(msgs)))
		m.appendMessages(msgs)
		st.Fresh += len(msgs)
	}
	var rerun bool
	for _, d := range decisions {
		if slices.Contains(st.Decided, d.ID) {
			continue // delivered before: changes nothing
		}
		i := m.findCall(d.CallID)
		if i < 0 || st.Calls[i].Status != CallSuspended {
			m.event(EventDecisionIgnored, d.CallID, fmt.Sprintf("decision %q: no suspended call %q", d.ID, d.CallID))
			continue
		}
		st.Decided = append(st.Decided, d.ID)
		c := &st.Calls[i]
		switch {
		case c.Prog != nil:
			// A parked program: the decision answers the call it waits on
			// when the program, run again, makes it again.
			m.event(EventDecisionApplied, c.Call.ID, "resume program")
			c.Status = CallResuming
			c.Prog.Decision = &d
			rerun = true
		case d.Action == CancelCall:
			m.event(EventDecisionApplied, c.Call.ID, "cancel")
			c.Status = CallCancelled
			c.Result = &ToolResult{CallID: c.Call.ID, Status: ToolError, Output: "cancelled by decision " + d.ID}
			m.answer(c)
		case d.Mode == ResumeUseResult:
			m.event(EventDecisionApplied, c.Call.ID, "resume "+d.Mode.String())
			c.Status = CallSucceeded // through Resuming, with nothing to run
			c.Result = &ToolResult{CallID: c.Call.ID, Status: ToolOK, Output: d.Payload}
			m.answer(c)
		default:
			m.event(EventDecisionApplied, c.Call.ID, "resume "+d.Mode.String())
			c.Status = CallResuming
			c.Decision = &d
			rerun = true
		}
	}
	if !rerun {
		return false
	}
	st.Round++
	for i := range st.Calls {
		c := &st.Calls[i]
		if c.Status == CallResuming {
			m.run(c)
		}
	}
	m.runRound()
	return true
}

// cancel ends the turn Cancelled: calls of the outstanding batch that have
// not finished are cancelled and answered, and so is every suspended call.
func (m *Machine) cancel(reason string) {
	st := &m.st
	if st.Phase == phaseTools || st.Phase == phaseExec || st.Phase == phaseChildren {
		for i := range st.Calls {
			c := &st.Calls[i]
			if c.Round != st.Round {
				continue
			}
			if c.Status == CallRunning || c.Status == CallSuspended {
				c.Status, c.Result = CallCancelled, nil
				m.event(EventToolCancelled, c.Call.ID, reason)
			}
			c.Exec, c.Prog = false, nil
			m.answer(c)
		}
	}
	st.ExecCall = ""
	m.finish(Termination{Reason: Cancelled, Detail: reason})
}

// finish ends the turn. Calls still suspended are cancelled unless the turn
// ends Suspended, so only a waiting turn leaves work for the next one.
func (m *Machine) finish(t Termination) {
	st := &m.st
	if t.Reason != Suspended {
		for i := range st.Calls {
			c := &st.Calls[i]
			if c.Status == CallSuspended {
				c.Status = CallCancelled
				c.Result = &ToolResult{CallID: c.Call.ID, Status: ToolError, Output: "cancelled: turn ended " + t.Reason.String()}
				m.event(EventToolCancelled, c.Call.ID, "turn ended "+t.Reason.String())
				m.answer(c)
			}
		}
		st.Status = StatusDone
	} else {
		st.Status = StatusWaiting
	}
	st.Term = t
	st.Request = nil
	if h := m.cfg.Hooks.RunEnd; h != nil {
		act := h(m.view(), t)
		m.emit(act.Emit)
		m.appendMessages(act.Messages)
	}
	m.event(EventRunFinished, "", t.String())
	m.yield(phaseDone)
}

// yield makes the effect for phase p outstanding. Every effect that expects
// an answer takes the next id; the effect itself is built from state alone,
// as Restore builds it.
func (m *Machine) yield(p phase) {
	st := &m.st
	m.flushProgress()
	st.Phase = p
	if p != phaseDone {
		st.Out = st.NextID
		st.NextID++
		st.OutIter = st.Iteration
	}
	m.out = m.build()
}

// build constructs the outstanding effect from state.
func (m *Machine) build() Effect {
	st := &m.st
	head := func(k Kind, h Hash) Head {
		return Head{ID: st.Out, Key: ReplayKey{Session: st.Session, Turn: st.Turn, Iteration: st.OutIter, Kind: k, Effect: st.Out}, Hash: h}
	}
	switch st.Phase {
	case phaseSync:
		return &SyncTools{H: head(KindSyncTools, syncToolsHash)}
	case phaseLLM:
		return &LLMCall{H: head(KindLLMCall, m.llmRequestHash(st.Request)), Attempt: st.Attempt, Request: *st.Request}
	case phaseSleep:
		return &Sleep{H: head(KindSleep, canonicalHash(KindSleep, st.SleepFor)), Duration: st.SleepFor, Reason: "provider retry backoff"}
	case phaseCheckpoint:
		return &Checkpoint{H: head(KindCheckpoint, checkpointHash(st.At)), At: st.At}
	case phaseAwait:
		return &AwaitEvent{H: head(KindAwaitEvent, canonicalHash(KindAwaitEvent, st.AwaitFor)), Name: "decisions", Timeout: st.AwaitFor}
	case phaseExec:
		return m.buildExec()
	case phaseChildren:
		return m.buildChildren()
	case phaseTools:
		e := &ToolCalls{}
		hashes := make([]Hash, 0, 4)
		for _, c := range st.Calls {
			if c.Round != st.Round || !c.Exec {
				continue
			}
			h := callHash(&c.Call, c.Decision)
			key := head(KindToolCall, h).Key
			key.Call = c.Call.ID
			e.Calls = append(e.Calls, PendingCall{Call: c.Call, Key: key, Hash: h, Decision: c.Decision})
			hashes = append(hashes, h)
		}
		e.H = head(KindToolCalls, callsHash(hashes))
		return e
	case phaseDone:
		return &Done{Outcome: m.outcome()}
	}
	return nil
}

func (m *Machine) outcome() Outcome {
	st := &m.st
	return Outcome{
		Status:      st.Status,
		Termination: st.Term,
		Messages:    slices.Clone(st.Messages[st.HistoryLen:]),
		Suspended:   m.Suspended(),
		Usage:       st.Usage,
		Iterations:  st.Iteration,
	}
}

// flushProgress queues a Progress with what is new since the last one.
func (m *Machine) flushProgress() {
	st := &m.st
	if len(st.Messages) == st.SentMsgs && len(st.Events) == st.SentEvents {
		return
	}
	st.Queue = append(st.Queue, queued{Kind: KindProgress,
		Messages: slices.Clone(st.Messages[st.SentMsgs:]),
		Events:   slices.Clone(st.Events[st.SentEvents:])})
	st.SentMsgs, st.SentEvents = len(st.Messages), len(st.Events)
}

func (m *Machine) emit(events []Event) {
	for _, e := range events {
		if e.Iteration == 0 {
			e.Iteration = m.st.Iteration
		}
		m.st.Queue = append(m.st.Queue, queued{Kind: KindEmit, Events: []Event{e}})
	}
}

func (m *Machine) event(typ, callID, detail string) {
	m.st.Events = append(m.st.Events, Event{Iteration: m.st.Iteration, Type: typ, CallID: callID, Detail: detail})
}

func (m *Machine) appendMessages(msgs []Message) {
	m.st.Messages = append(m.st.Messages, msgs...)
}

// runHook runs a phase hook, applies its messages and emits, and returns its
// stop request, if any.
func (m *Machine) runHook(h func(View) HookAction) *StopRequest {
	if h == nil {
		return nil
	}
	act := h(m.view())
	m.emit(act.Emit)
	m.appendMessages(act.Messages)
	return act.Stop
}

func (m *Machine) view() View {
	st := &m.st
	return View{Session: st.Session, Turn: st.Turn, Iteration: st.Iteration, Messages: slices.Clip(st.Messages), Usage: st.Usage}
}

func (m *Machine) findCall(id string) int {
	for i := range m.st.Calls {
		if m.st.Calls[i].Call.ID == id {
			return i
		}
	}
	return -1
}

func (m *Machine) countSuspended() int {
	n := 0
	for _, c := range m.st.Calls {
		if c.Status == CallSuspended {
			n++
		}
	}
	return n
}
