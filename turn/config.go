package turn

import (
	"errors"
	"fmt"
	"time"
)

// Config is what the host owns and rebuilds the same way on every worker. It
// is not part of a snapshot: hooks are code, not data.
type Config struct {
	Model    string
	System   string // system prompt; empty for none
	Sampling Sampling
	Limits   Limits
	Hooks    Hooks
	// DecisionWait, when positive, parks a waiting run on an AwaitEvent for
	// decisions of at most this long before ending the turn Suspended.
	DecisionWait time.Duration
	// GracePrompt is the message that asks for a final answer once
	// Limits.MaxIterations is reached. Empty takes DefaultGracePrompt.
	GracePrompt string
	// Mode says whether the model calls tools, runs programs, or both.
	Mode Mode
}

// DefaultGracePrompt asks the model for an answer without more tool calls.
const DefaultGracePrompt = "You have reached the limit of tool rounds for this turn. Answer now with what you have, without calling tools."

// Limits are the stop rules. Zero values take the defaults noted.
type Limits struct {
	// MaxIterations caps model inferences; one grace inference follows.
	// Default 25.
	MaxIterations int
	// TokenBudget stops the turn before an inference once usage reaches it.
	// Zero means no budget.
	TokenBudget int64
	// MaxToolFailures stops the turn once this many tool calls in a row have
	// failed. Zero means no limit.
	MaxToolFailures int
	// MaxAttempts caps attempts of one inference under retryable provider
	// errors. Default 3.
	MaxAttempts int
	// Backoff is the sleep before retry attempt+1 after attempt failed.
	// It must be a pure function. Default: 1s doubling, at most 30s.
	Backoff func(attempt int) time.Duration
	// MaxBackoff caps every retry sleep: Backoff's, and the longer wait a
	// provider may ask for (CallError.RetryAfter), so a server cannot park
	// a turn for an hour. Default DefaultMaxBackoff (30s).
	MaxBackoff time.Duration
	// ProgramCalls caps the calls one program makes; past it the program
	// ends failed. Default DefaultProgramCalls.
	ProgramCalls int
}

// Default limits.
const (
	DefaultMaxIterations = 25
	DefaultMaxAttempts   = 3
	DefaultMaxBackoff    = 30 * time.Second
)

// DefaultBackoff doubles from one second up to thirty.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < DefaultMaxBackoff; i++ {
		d *= 2
	}
	return min(d, DefaultMaxBackoff)
}

func (c Config) withDefaults() Config {
	if c.Limits.MaxIterations == 0 {
		c.Limits.MaxIterations = DefaultMaxIterations
	}
	if c.Limits.MaxAttempts == 0 {
		c.Limits.MaxAttempts = DefaultMaxAttempts
	}
	if c.Limits.Backoff == nil {
		c.Limits.Backoff = DefaultBackoff
	}
	if c.Limits.MaxBackoff == 0 {
		c.Limits.MaxBackoff = DefaultMaxBackoff
	}
	if c.Limits.ProgramCalls == 0 {
		c.Limits.ProgramCalls = DefaultProgramCalls
	}
	if c.GracePrompt == "" {
		c.GracePrompt = DefaultGracePrompt
	}
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	l := c.Limits
	switch {
	case l.MaxIterations < 0:
		return fmt.Errorf("turn: config: MaxIterations %d is negative", l.MaxIterations)
	case l.TokenBudget < 0:
		return fmt.Errorf("turn: config: TokenBudget %d is negative", l.TokenBudget)
	case l.MaxToolFailures < 0:
		return fmt.Errorf("turn: config: MaxToolFailures %d is negative", l.MaxToolFailures)
	case l.MaxAttempts < 0:
		return fmt.Errorf("turn: config: MaxAttempts %d is negative", l.MaxAttempts)
	case l.MaxBackoff < 0:
		return fmt.Errorf("turn: config: MaxBackoff %v is negative", l.MaxBackoff)
	case l.ProgramCalls < 0:
		return fmt.Errorf("turn: config: ProgramCalls %d is negative", l.ProgramCalls)
	case c.Mode > ModeCode:
		return fmt.Errorf("turn: config: unknown mode %d", c.Mode)
	case c.DecisionWait < 0:
		return errors.New("turn: config: DecisionWait is negative")
	}
	return nil
}

// View is the read-only state a hook sees. Hooks must not modify Messages.
type View struct {
	Session   string
	Turn      string
	Iteration int
	Messages  []Message
	Usage     Usage
}

// HookAction is what a phase hook asks for: messages to append, notices to
// emit, or the end of the run.
type HookAction struct {
	Messages []Message
	Emit     []Event
	// Stop ends the run with BehaviorRequested and this code and detail.
	Stop *StopRequest
}

// StopRequest is a hook's request to end the run.
type StopRequest struct {
	Code   string
	Detail string
}

// Verdict is a gate hook's answer for one call.
type Verdict uint8

const (
	Allow Verdict = iota
	// Block fails the call with Reason as its error, returned to the model.
	Block
	// Suspend parks the call until a decision arrives.
	Suspend
)

// Gate is what BeforeTool decides for one call.
type Gate struct {
	Verdict Verdict
	Reason  string // for Block
	Ticket  Ticket // for Suspend
}

// Hooks are pure functions called at the phases of a run. Any may be nil.
// They must be deterministic: same arguments, same answer, on every worker.
type Hooks struct {
	// RunStart runs once after the input is appended; it may add messages or stop.
	RunStart func(View) HookAction
	// BeforeInference runs before each model call; it may add messages or stop.
	BeforeInference func(View) HookAction
	// AfterInference sees each response before it is appended. A stop keeps
	// the response's text and drops its tool calls.
	AfterInference func(View, ModelResponse) HookAction
	// BeforeTool gates each call the model asked for. Calls resumed by a
	// decision skip it: the decision is the verdict.
	BeforeTool func(View, ToolCall) Gate
	// AfterTool sees each call's outcome once its round is over.
	AfterTool func(View, ToolCall, ToolResult) HookAction
	// RunEnd runs once as the turn ends; it may add messages. Stop is ignored.
	RunEnd func(View, Termination) HookAction
}
