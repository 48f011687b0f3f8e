package turn

import "fmt"

// RunStatus is the coarse state of a run.
type RunStatus uint8

const (
	// StatusRunning: the machine is inferring or running tools.
	StatusRunning RunStatus = iota + 1
	// StatusWaiting: every live tool call is suspended on a decision. A turn that
	// ends Waiting is continued by a later input carrying decisions.
	StatusWaiting
	// StatusDone: the run ended; Termination says why.
	StatusDone
)

func (s RunStatus) String() string {
	switch s {
	case StatusRunning:
		return "running"
	case StatusWaiting:
		return "waiting"
	case StatusDone:
		return "done"
	}
	return fmt.Sprintf("run-status(%d)", uint8(s))
}

// Reason says why a turn ended.
type Reason uint8

const (
	// NaturalEnd: the model answered and nothing was left to do.
	NaturalEnd Reason = iota + 1
	// BehaviorRequested: a hook ended the run.
	BehaviorRequested
	// Stopped: a stop rule fired; Code and Detail say which.
	Stopped
	// Cancelled: the turn was cancelled from outside.
	Cancelled
	// Suspended: the turn parked with calls waiting on decisions.
	Suspended
	// Error: the turn could not go on (a terminal provider error, a model
	// response that breaks the protocol).
	Error
)

func (r Reason) String() string {
	switch r {
	case NaturalEnd:
		return "natural-end"
	case BehaviorRequested:
		return "behavior-requested"
	case Stopped:
		return "stopped"
	case Cancelled:
		return "cancelled"
	case Suspended:
		return "suspended"
	case Error:
		return "error"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Stop codes used by the machine's own stop rules and errors.
const (
	CodeMaxIterations   = "max_iterations"
	CodeTokenBudget     = "token_budget"
	CodeToolFailures    = "consecutive_tool_failures"
	CodeProviderError   = "provider_error"
	CodeInvalidResponse = "invalid_model_response"
)

// Termination is the reason a turn ended, with a code and detail where the
// reason carries them (Stopped, BehaviorRequested, Error).
type Termination struct {
	Reason Reason `msgpack:"r"`
	Code   string `msgpack:"c,omitempty"`
	Detail string `msgpack:"d,omitempty"`
}

func (t Termination) String() string {
	s := t.Reason.String()
	if t.Code != "" {
		s += "{" + t.Code
		if t.Detail != "" {
			s += ": " + t.Detail
		}
		s += "}"
	} else if t.Detail != "" {
		s += "{" + t.Detail + "}"
	}
	return s
}

// CallStatus is the state of one tool call.
type CallStatus uint8

const (
	CallNew CallStatus = iota + 1
	CallRunning
	CallSuspended
	CallResuming
	CallSucceeded
	CallFailed
	CallCancelled
)

func (s CallStatus) String() string {
	switch s {
	case CallNew:
		return "new"
	case CallRunning:
		return "running"
	case CallSuspended:
		return "suspended"
	case CallResuming:
		return "resuming"
	case CallSucceeded:
		return "succeeded"
	case CallFailed:
		return "failed"
	case CallCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("call-status(%d)", uint8(s))
}

// Terminal reports whether no transition leaves s.
func (s CallStatus) Terminal() bool {
	return s == CallSucceeded || s == CallFailed || s == CallCancelled
}

// callTransitions lists every allowed move of a tool call. New may also fail
// or be cancelled directly: a gate hook that blocks a call, an unknown tool,
// or a cancel before the batch ran never reaches Running.
var callTransitions = map[CallStatus][]CallStatus{
	CallNew:       {CallRunning, CallSuspended, CallFailed, CallCancelled},
	CallRunning:   {CallSuspended, CallSucceeded, CallFailed, CallCancelled},
	CallSuspended: {CallResuming, CallCancelled},
	CallResuming:  {CallRunning, CallSuspended, CallSucceeded, CallFailed, CallCancelled},
}

// CanBecome reports whether a call in status s may move to t.
func (s CallStatus) CanBecome(t CallStatus) bool {
	for _, n := range callTransitions[s] {
		if n == t {
			return true
		}
	}
	return false
}
