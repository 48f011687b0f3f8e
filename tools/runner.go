package tools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash/turn"
)

// DefaultTimeout is the per-call timeout of a Runner built without
// WithDefaultTimeout.
const DefaultTimeout = time.Minute

// RunnerOption configures a Runner.
type RunnerOption func(*Runner)

// WithDefaultTimeout sets the timeout of calls to tools that have none of
// their own.
func WithDefaultTimeout(d time.Duration) RunnerOption {
	return func(r *Runner) {
		if d > 0 {
			r.timeout = d
		}
	}
}

// WithLogger logs panics (with their stacks, which the model never sees)
// and calls abandoned at their deadline. Without it the Runner does not log.
func WithLogger(l *slog.Logger) RunnerOption {
	return func(r *Runner) { r.log = l }
}

// Runner runs tool calls from a registry, each under a timeout, and turns
// every outcome of the tool into a turn.ToolResult.
type Runner struct {
	reg        *Registry
	timeout    time.Duration
	log        *slog.Logger
	stragglers atomic.Int64
}

// NewRunner returns a Runner for the tools of reg.
func NewRunner(reg *Registry, opts ...RunnerOption) *Runner {
	r := &Runner{reg: reg, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// Stragglers is the number of calls abandoned at their deadline whose tool
// has not returned yet. It stays above zero while a tool ignores its context.
func (r *Runner) Stragglers() int { return int(r.stragglers.Load()) }

// errTimeout is the cause of a call context that reached its deadline.
var errTimeout = errors.New("tools: call timed out")

// outcome is what Tool.Call did.
type outcome struct {
	res Result
	err error
}

// call states, for deciding who owns a late outcome.
const (
	running int32 = iota
	returned
	abandoned
)

// Invoke runs one call and returns its result.
//
// The tool runs with a context carrying CallInfo{call.Key, attempt, inDoubt,
// a copy of call.Decision} and a deadline: the tool's own timeout or the
// Runner's default. Every outcome of the tool is a result: output, a failure
// the model sees (the tool's error, invalid arguments, a panic, the
// deadline, an unknown tool name) or pending. A tool still running at its
// deadline is abandoned: Invoke returns a timeout failure at once and
// ignores whatever the tool returns later.
//
// The only error is ErrInterrupted: ctx ended before the call had an
// outcome, or the tool failed after ctx ended (its failure may be the
// cancellation's doing). Then no result must be recorded for the call.
func (r *Runner) Invoke(ctx context.Context, call turn.PendingCall, attempt int, inDoubt bool) (turn.ToolResult, error) {
	if ctx.Err() != nil {
		return turn.ToolResult{}, interrupted(ctx)
	}
	name := call.Call.Name
	t, ok := r.reg.Get(name)
	if !ok {
		// Perhaps not found yet (the registry is settling): wait for it
		// within the default deadline, as the call would have run.
		wctx, cancel := context.WithTimeout(ctx, r.timeout)
		t, ok = r.reg.Await(wctx, name)
		cancel()
		if ctx.Err() != nil {
			return turn.ToolResult{}, interrupted(ctx)
		}
	}
	if !ok {
		return failed(call, fmt.Sprintf("unknown tool %q", name)), nil
	}
	timeout := r.timeout
	if tt, ok := t.(TimeoutTool); ok && tt.Timeout() > 0 {
		timeout = tt.Timeout()
	}
	info := CallInfo{Key: call.Key, Attempt: max(attempt, 1), InDoubt: inDoubt}
	if call.Decision != nil {
		d := *call.Decision
		info.Decision = &d
	}
	cctx, cancel := context.WithTimeoutCause(NewContext(ctx, info), timeout, errTimeout)
	defer cancel()

	done := make(chan outcome, 1) // never blocks the tool's goroutine
	var state atomic.Int32
	go func() {
		var o outcome
		defer func() {
			if v := recover(); v != nil {
				o = outcome{err: &PanicError{Tool: name, Value: v, Stack: debug.Stack()}}
			}
			done <- o
			if !state.CompareAndSwap(running, returned) {
				r.stragglers.Add(-1)
				if r.log != nil {
					r.log.Debug("tools: abandoned call returned", "tool", name, "key", call.Key.String())
				}
			}
		}()
		o.res, o.err = t.Call(cctx, []byte(call.Call.Arguments))
	}()

	var o outcome
	select {
	case o = <-done:
	case <-cctx.Done():
		r.stragglers.Add(1)
		if state.CompareAndSwap(running, abandoned) {
			if ctx.Err() != nil {
				return turn.ToolResult{}, interrupted(ctx)
			}
			if r.log != nil {
				r.log.Warn("tools: call abandoned at its deadline",
					"tool", name, "key", call.Key.String(), "timeout", timeout)
			}
			return failed(call, timeoutText(name, timeout)), nil
		}
		// The tool returned just now; its outcome is in done or about to be.
		r.stragglers.Add(-1)
		o = <-done
	}
	return r.result(ctx, cctx, call, timeout, o)
}

// result turns what the tool returned into the call's result.
func (r *Runner) result(ctx, cctx context.Context, call turn.PendingCall, timeout time.Duration, o outcome) (turn.ToolResult, error) {
	name := call.Call.Name
	if o.err == nil {
		switch o.res.Status {
		case 0, turn.ToolOK:
			return turn.ToolResult{CallID: call.Call.ID, Status: turn.ToolOK, Output: o.res.Output}, nil
		case turn.ToolError, turn.ToolPending:
			return turn.ToolResult{CallID: call.Call.ID, Status: o.res.Status, Output: o.res.Output}, nil
		}
		return failed(call, fmt.Sprintf("tool %q returned an invalid status %d", name, o.res.Status)), nil
	}
	var pe *PendingError
	if errors.As(o.err, &pe) {
		return turn.ToolResult{CallID: call.Call.ID, Status: turn.ToolPending, Output: pe.Ticket}, nil
	}
	var panicked *PanicError
	if errors.As(o.err, &panicked) {
		if r.log != nil {
			r.log.Error("tools: tool panicked", "tool", name, "key", call.Key.String(),
				"panic", fmt.Sprint(panicked.Value), "stack", string(panicked.Stack))
		}
		return failed(call, panicked.Error()), nil
	}
	if ctx.Err() != nil {
		return turn.ToolResult{}, interrupted(ctx)
	}
	if context.Cause(cctx) == errTimeout {
		return failed(call, timeoutText(name, timeout)), nil
	}
	return failed(call, o.err.Error()), nil
}

// AttemptFunc tells RunBatch which attempt a call is and whether an earlier
// attempt may have run without its outcome being recorded.
type AttemptFunc func(call turn.PendingCall) (attempt int, inDoubt bool)

// RunBatch runs the calls of batch in parallel, each through Invoke, and
// returns their results in the batch's call order.
//
// attempts, if not nil, is asked for each call's attempt and in-doubt flag;
// nil means a first attempt for every call. onResult, if not nil, is called
// with each result as soon as it is known, in the order calls finish, one at
// a time from RunBatch's goroutine, so a driver can record results while
// slower calls still run.
//
// If ctx ends first, every unfinished call is abandoned at once (see Invoke)
// and RunBatch returns an ErrInterrupted error with the results that were
// known, still in call order; the calls missing from them have no outcome
// and must run again.
func (r *Runner) RunBatch(ctx context.Context, batch *turn.ToolCalls, attempts AttemptFunc, onResult func(turn.ToolResult)) ([]turn.ToolResult, error) {
	type answer struct {
		i   int
		res turn.ToolResult
		err error
	}
	if batch == nil || len(batch.Calls) == 0 {
		return nil, nil
	}
	answers := make(chan answer, len(batch.Calls))
	for i, c := range batch.Calls {
		attempt, inDoubt := 1, false
		if attempts != nil {
			attempt, inDoubt = attempts(c)
		}
		go func() {
			res, err := r.Invoke(ctx, c, attempt, inDoubt)
			answers <- answer{i, res, err}
		}()
	}
	// Invoke always returns, by the call's deadline at the latest.
	got := make([]*turn.ToolResult, len(batch.Calls))
	var err error
	for range batch.Calls {
		a := <-answers
		if a.err != nil {
			err = a.err
			continue
		}
		got[a.i] = &a.res
		if onResult != nil {
			onResult(a.res)
		}
	}
	results := make([]turn.ToolResult, 0, len(got))
	for _, res := range got {
		if res != nil {
			results = append(results, *res)
		}
	}
	return results, err
}

func failed(call turn.PendingCall, output string) turn.ToolResult {
	return turn.ToolResult{CallID: call.Call.ID, Status: turn.ToolError, Output: output}
}

func timeoutText(name string, timeout time.Duration) string {
	return fmt.Sprintf("tool %q timed out after %s", name, timeout)
}

func interrupted(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
}
