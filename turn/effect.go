package turn

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// EffectID numbers the effects of one turn that expect an answer: 1, 2, 3 …
// The n-th such effect of a turn always has id n, however often it replays.
type EffectID uint64

// Kind names an effect.
type Kind uint8

const (
	KindSyncTools Kind = iota + 1
	KindLLMCall
	KindToolCalls
	KindCheckpoint
	KindSleep
	KindAwaitEvent
	KindDone
	KindProgress
	KindEmit
	// KindToolCall names one call of a ToolCalls batch in replay keys.
	KindToolCall
	KindExecCode
	KindProgramCalls
	// KindProgramCall names one call a program made in replay keys.
	KindProgramCall
)

var kindNames = [...]string{
	KindSyncTools:    "sync-tools",
	KindLLMCall:      "llm-call",
	KindToolCalls:    "tool-calls",
	KindCheckpoint:   "checkpoint",
	KindSleep:        "sleep",
	KindAwaitEvent:   "await-event",
	KindDone:         "done",
	KindProgress:     "progress",
	KindEmit:         "emit",
	KindToolCall:     "tool-call",
	KindExecCode:     "exec-code",
	KindProgramCalls: "program-calls",
	KindProgramCall:  "program-call",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ReplayKey names one effect of one turn for the journal. It is stable across
// workers and restarts because every part of it is derived deterministically.
type ReplayKey struct {
	Session   string
	Turn      string
	Iteration int
	Kind      Kind
	Effect    EffectID
	// Call is set for one call of a ToolCalls batch.
	Call string
}

func (k ReplayKey) String() string {
	b := make([]byte, 0, len(k.Session)+len(k.Turn)+len(k.Call)+32)
	b = append(b, k.Session...)
	b = append(b, '/')
	b = append(b, k.Turn...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(k.Iteration), 10)
	b = append(b, '/')
	b = append(b, k.Kind.String()...)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(k.Effect), 10)
	if k.Call != "" {
		b = append(b, '/')
		b = append(b, k.Call...)
	}
	return string(b)
}

// Hash is the sha256 of an effect request's canonical encoding. The journal
// compares it with the recorded one to detect a turn that took another path.
type Hash [32]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Short is the first 8 hex digits, for logs and test output.
func (h Hash) Short() string { return hex.EncodeToString(h[:4]) }

// Head is what every effect that expects an answer carries: its id, its
// replay key and the hash of its request.
type Head struct {
	ID   EffectID
	Key  ReplayKey
	Hash Hash
}

// Effect is one thing the machine asks its driver to do. The set is closed:
// SyncTools, LLMCall, ToolCalls, ExecCode, ProgramCalls, Checkpoint, Sleep
// and AwaitEvent expect an answer by id; Progress and Emit are fire-and-forget; Done ends the turn.
type Effect interface {
	Kind() Kind
	// Head returns the id, key and hash; the zero Head for effects that
	// expect no answer.
	Head() Head
	isEffect()
}

// SyncTools asks for the tool catalog. Because the answer is journaled, a
// replay sees the catalog the turn started with even if tools changed since.
type SyncTools struct{ H Head }

// LLMCall asks for one model call. Attempt counts retries of the same
// inference after retryable provider errors. Request.Messages shares the
// machine's conversation (capped at its end): read it, do not change it.
type LLMCall struct {
	H       Head
	Attempt int
	Request ModelRequest
}

// PendingCall is one call of a ToolCalls batch, with its own key and hash.
type PendingCall struct {
	Call ToolCall
	Key  ReplayKey
	Hash Hash
	// Decision is set when the call runs because a decision resumed it. In
	// ResumePassToTool mode the tool reads the decision's payload.
	Decision *Decision
}

// ToolCalls asks for one batch of tool calls; the driver may run them in
// parallel and may answer them one ToolResults at a time.
type ToolCalls struct {
	H     Head
	Calls []PendingCall
}

// CheckpointKind says where a checkpoint sits in the loop.
type CheckpointKind uint8

const (
	// AfterTools follows every tool round.
	AfterTools CheckpointKind = iota + 1
	// BeforeFinish comes when the model answered without tool calls.
	BeforeFinish
)

func (c CheckpointKind) String() string {
	switch c {
	case AfterTools:
		return "after-tools"
	case BeforeFinish:
		return "before-finish"
	}
	return fmt.Sprintf("checkpoint(%d)", uint8(c))
}

// Checkpoint is a safe boundary. The driver answers with input that arrived
// during the turn: messages to inject and decisions for suspended calls.
type Checkpoint struct {
	H  Head
	At CheckpointKind
}

// CheckpointHash is the request hash of a checkpoint at c, for a driver
// that read a checkpoint's answer before the machine asked for it.
func CheckpointHash(c CheckpointKind) Hash { return checkpointHash(c) }

// Sleep asks the driver to wait, durably: a replay after the sleep ended does
// not sleep again. The machine uses it for provider retry backoff.
type Sleep struct {
	H        Head
	Duration time.Duration
	Reason   string
}

// AwaitEvent is a named durable wait with a timeout. The machine parks on
// "decisions" while every live call is suspended, if Config.DecisionWait is set.
type AwaitEvent struct {
	H       Head
	Name    string
	Timeout time.Duration
}

// Progress carries the messages and events that are new since the previous
// Progress, so a driver can persist or stream them. Fire-and-forget.
type Progress struct {
	Messages []Message
	Events   []Event
}

// Emit carries a notice from a hook, for live observers. Fire-and-forget.
type Emit struct{ Event Event }

// Done ends the turn. Next keeps returning it.
type Done struct{ Outcome Outcome }

func (e *SyncTools) Kind() Kind  { return KindSyncTools }
func (e *LLMCall) Kind() Kind    { return KindLLMCall }
func (e *ToolCalls) Kind() Kind  { return KindToolCalls }
func (e *Checkpoint) Kind() Kind { return KindCheckpoint }
func (e *Sleep) Kind() Kind      { return KindSleep }
func (e *AwaitEvent) Kind() Kind { return KindAwaitEvent }
func (e *Progress) Kind() Kind   { return KindProgress }
func (e *Emit) Kind() Kind       { return KindEmit }
func (e *Done) Kind() Kind       { return KindDone }

func (e *SyncTools) Head() Head  { return e.H }
func (e *LLMCall) Head() Head    { return e.H }
func (e *ToolCalls) Head() Head  { return e.H }
func (e *Checkpoint) Head() Head { return e.H }
func (e *Sleep) Head() Head      { return e.H }
func (e *AwaitEvent) Head() Head { return e.H }
func (e *Progress) Head() Head   { return Head{} }
func (e *Emit) Head() Head       { return Head{} }
func (e *Done) Head() Head       { return Head{} }

func (*SyncTools) isEffect()  {}
func (*LLMCall) isEffect()    {}
func (*ToolCalls) isEffect()  {}
func (*Checkpoint) isEffect() {}
func (*Sleep) isEffect()      {}
func (*AwaitEvent) isEffect() {}
func (*Progress) isEffect()   {}
func (*Emit) isEffect()       {}
func (*Done) isEffect()       {}

// Outcome is what a finished turn leaves for its commit.
type Outcome struct {
	Status      RunStatus
	Termination Termination
	// Messages appended during this turn, in order.
	Messages []Message
	// Suspended lists the calls still waiting on a decision.
	Suspended  []SuspendedCall
	Usage      Usage
	Iterations int
}

// Event records something that happened in the turn.
type Event struct {
	Iteration int    `msgpack:"n"`
	Type      string `msgpack:"t"`
	CallID    string `msgpack:"c,omitempty"`
	Detail    string `msgpack:"d,omitempty"`
}

// Event types recorded by the machine.
const (
	EventRunStarted       = "run.started"
	EventRunWaiting       = "run.waiting"
	EventRunResumed       = "run.resumed"
	EventRunFinished      = "run.finished"
	EventLLMRetry         = "llm.retry"
	EventToolStarted      = "tool.started"
	EventToolFinished     = "tool.finished"
	EventToolSuspended    = "tool.suspended"
	EventToolBlocked      = "tool.blocked"
	EventToolCancelled    = "tool.cancelled"
	EventDecisionApplied  = "decision.applied"
	EventDecisionIgnored  = "decision.ignored"
	EventMessagesInjected = "messages.injected"
	EventGraceIteration   = "iteration.grace"
	// A program's run: started, each call it makes (CallID is the call's
	// key, the program call's id and #ordinal), each outcome, its end.
	EventProgramStarted = "program.started"
	EventProgramCall    = "program.call"
	EventProgramRefused = "program.refused"
	EventProgramOutcome = "program.outcome"
	EventProgramEnded   = "program.ended"
)
