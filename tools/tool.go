package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lash-run/lash/turn"
)

// Tool is something the model can call.
//
// Call must honour ctx: return soon after ctx is done. A call that outlives
// its deadline is abandoned by the Runner, which answers with a timeout
// error; the abandoned goroutine runs on until Call returns, and what it
// returns then is discarded.
//
// Call answers with a Result or an error. A returned error is shown to the
// model as a failed call (its text is the output), except a *PendingError,
// which suspends the call (see Pending). Call may run more than once for the
// same model call (see CallInfo); a tool with side effects uses
// CallInfo.IdempotencyKey to do them at most once.
type Tool interface {
	Spec() turn.ToolSpec
	Call(ctx context.Context, args json.RawMessage) (Result, error)
}

// TimeoutTool is a Tool with its own per-call timeout, which overrides the
// Runner's default when positive. Func tools built WithTimeout implement it.
type TimeoutTool interface {
	Tool
	Timeout() time.Duration
}

// Result is what a call produced.
type Result struct {
	// Status is turn.ToolOK, turn.ToolError or turn.ToolPending. The zero
	// value means turn.ToolOK.
	Status turn.ToolStatus
	// Output is the text the model sees. For a pending call it is the
	// ticket: what the call waits for.
	Output string
}

// PendingError suspends a call until a decision arrives for it. Return it
// from Call or from a Func's function, usually through Pending.
type PendingError struct {
	// Ticket says what the call waits for; it becomes the pending result's
	// output and the suspended call's ticket reason.
	Ticket string
}

func (e *PendingError) Error() string { return "tools: call pending: " + e.Ticket }

// Pending returns a *PendingError with the ticket. A tool returning it is
// suspended; the turn resumes it when a decision for the call arrives, and
// in ResumePassToTool mode runs it again with CallInfo.Decision set.
func Pending(ticket string) error { return &PendingError{Ticket: ticket} }

// PanicError is a panic recovered from a tool. The model sees only the
// panic value; Stack is for logs.
type PanicError struct {
	Tool  string
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("tool %q panicked: %v", e.Tool, e.Value) }

// ErrInterrupted is returned by Runner methods when their context ended
// before a call had an outcome. It is not the call's outcome: record nothing
// for the call; it must run again, in doubt.
var ErrInterrupted = errors.New("tools: interrupted")
