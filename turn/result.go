package turn

import "time"

// Result answers one effect, matched by EffectID. The set is closed; each
// effect kind has its result type, and Cancel answers any of them.
type Result interface {
	// Answers is the id of the effect this result answers.
	Answers() EffectID
	isResult()
}

// ToolsSynced answers SyncTools with the catalog offered to the model.
type ToolsSynced struct {
	ID    EffectID
	Tools []ToolSpec
}

// LLMResult answers LLMCall: a response or an error, never both.
type LLMResult struct {
	ID       EffectID
	Response *ModelResponse
	Err      *CallError
}

// CallError is a failed model call. Retryable errors (rate limits, 5xx,
// timeouts) are retried through Sleep up to Limits.MaxAttempts. RetryAfter
// is the wait the provider asked for (an HTTP Retry-After), zero if none:
// the retry sleeps at least that long, but never longer than
// Limits.MaxBackoff. It travels inside the journaled result, so a replay
// sleeps the same.
type CallError struct {
	Retryable  bool          `msgpack:"r,omitempty"`
	Code       string        `msgpack:"c,omitempty"`
	Message    string        `msgpack:"m,omitempty"`
	RetryAfter time.Duration `msgpack:"ra,omitempty"`
}

// ToolStatus is how one tool call came back.
type ToolStatus uint8

const (
	ToolOK ToolStatus = iota + 1
	ToolError
	// ToolPending suspends the call; Output says what it waits for.
	ToolPending
)

// ToolResult is the outcome of one call.
type ToolResult struct {
	CallID string     `msgpack:"i"`
	Status ToolStatus `msgpack:"s"`
	Output string     `msgpack:"o,omitempty"`
}

// ToolResults answers some or all calls of a ToolCalls batch. The batch stays
// outstanding until every call has an outcome, so a driver may feed results as
// they arrive. Repeating an identical result is a no-op.
type ToolResults struct {
	ID      EffectID
	Results []ToolResult
}

// CheckpointResult answers Checkpoint with what arrived during the turn.
type CheckpointResult struct {
	ID        EffectID
	Messages  []Message
	Decisions []Decision
}

// SleepDone answers Sleep.
type SleepDone struct{ ID EffectID }

// EventResult answers AwaitEvent: the decisions and messages that arrived,
// or TimedOut.
type EventResult struct {
	ID        EffectID
	TimedOut  bool
	Messages  []Message
	Decisions []Decision
}

// Cancel answers any outstanding effect by cancelling the turn: running and
// suspended calls are cancelled and the turn ends Cancelled. Journaled like
// any other answer, so a replay cancels at the same point.
type Cancel struct {
	ID     EffectID
	Reason string
}

func (r ToolsSynced) Answers() EffectID      { return r.ID }
func (r LLMResult) Answers() EffectID        { return r.ID }
func (r ToolResults) Answers() EffectID      { return r.ID }
func (r CheckpointResult) Answers() EffectID { return r.ID }
func (r SleepDone) Answers() EffectID        { return r.ID }
func (r EventResult) Answers() EffectID      { return r.ID }
func (r Cancel) Answers() EffectID           { return r.ID }

func (ToolsSynced) isResult()      {}
func (LLMResult) isResult()        {}
func (ToolResults) isResult()      {}
func (CheckpointResult) isResult() {}
func (SleepDone) isResult()        {}
func (EventResult) isResult()      {}
func (Cancel) isResult()           {}

// Action is what a decision does to a suspended call.
type Action uint8

const (
	Resume Action = iota + 1
	CancelCall
)

// ResumeMode says how a resumed call gets its result.
type ResumeMode uint8

const (
	// ResumeReplay runs the original call again.
	ResumeReplay ResumeMode = iota + 1
	// ResumeUseResult takes the decision's payload as the call's result.
	ResumeUseResult
	// ResumePassToTool runs the call with the decision attached, for tools
	// that asked for input.
	ResumePassToTool
)

func (m ResumeMode) String() string {
	switch m {
	case ResumeReplay:
		return "replay"
	case ResumeUseResult:
		return "use-result"
	case ResumePassToTool:
		return "pass-to-tool"
	}
	return "mode(?)"
}

// Decision resumes or cancels one suspended call. Its ID makes delivery
// idempotent: a decision id already applied changes nothing.
type Decision struct {
	ID      string     `msgpack:"i"`
	CallID  string     `msgpack:"c"`
	Action  Action     `msgpack:"a"`
	Mode    ResumeMode `msgpack:"m,omitempty"`
	Payload string     `msgpack:"p,omitempty"`
}

// Ticket says what decision a suspended call waits for.
type Ticket struct {
	Reason string `msgpack:"r,omitempty"`
	Data   string `msgpack:"d,omitempty"`
}

// SuspendedCall is a call parked on a decision, as a turn leaves it for the
// next one.
type SuspendedCall struct {
	Call      ToolCall `msgpack:"c"`
	Ticket    Ticket   `msgpack:"t"`
	Iteration int      `msgpack:"n"`
	// Program is a parked program's run, for a program call.
	Program *ParkedProgram `msgpack:"pg,omitempty"`
}

// Input is what starts a turn: new messages and decisions for calls that an
// earlier turn left suspended.
type Input struct {
	Messages  []Message
	Decisions []Decision
}

// Start is everything a fresh turn is built from. Session and Turn go into
// every replay key, so both must be stable across workers.
type Start struct {
	Session string
	Turn    string
	History []Message
	// HistoryDigest, when set, must be Digest{}.Extend(History...): a
	// driver that keeps it along spares the machine hashing the whole
	// history at every turn. Nil computes it. With it the machine takes
	// History as the messages of earlier turns, checked as they were
	// made, and does not look at each again: a turn's work does not grow
	// with the session.
	HistoryDigest *Digest
	// Frame, when set, is History with one free element before it:
	// Frame[1:] is History, in the same array, and Frame's capacity past
	// it is room. The machine then lays its model requests out in that
	// array (the system prompt in Frame[0], the turn's messages after
	// History) instead of copying a history however long at every turn.
	// The caller leaves Frame[0] and the room to the machine while it
	// runs; History's elements are only read. Any other Frame is ignored.
	Frame     []Message
	Suspended []SuspendedCall
	Input     Input
}
