package processes

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lash-run/lash/leases"
)

// Run is one attempt at a process. Its started event took the attempt's
// fencing token (one more than the newest on the log), and every event
// the run writes carries it, so once another attempt started (or recovery
// ended the process) its writes are refused with ErrFenced or ErrTerminal:
// it must stop.
type Run struct {
	r     *Registry
	p     *Process
	start Start
}

// Start begins an attempt at the process, run by runner (a node's lease
// owner, whose liveness says whether the attempt may still be running),
// by appending its started event. It refuses ended processes, externally
// owned ones, and owner-bound ones that started before. Whether another
// runner still runs an earlier attempt is the caller's to decide first
// (Recover, with that runner's death evidence): a start fences it out.
func (r *Registry) Start(ctx context.Context, id string, runner leases.Owner) (*Run, error) {
	p, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.startOn(ctx, p, runner, nil)
}

// startOn is Start on the caller's fold of the process, which the
// compare-and-set of the started event proves current or brings up to
// date; guard, if not nil, may refuse the start on the fold brought up to
// date. Of two runners starting on one head, one lands: the start is the
// claim.
func (r *Registry) startOn(ctx context.Context, p *Process, runner leases.Owner, guard func(*Process) error) (*Run, error) {
	var s Start
	_, _, err := r.appendWith(ctx, p.ID, p, func(p *Process) (Event, error) {
		if guard != nil {
			if err := guard(p); err != nil {
				return Event{}, err
			}
		}
		s = Start{Owner: OwnerOf(runner), Attempt: p.Attempts() + 1, Token: p.Token + 1}
		return Event{Type: TypeStarted, Token: s.Token, Data: jsonData(s)}, nil
	})
	if err != nil {
		return nil, err
	}
	return &Run{r: r, p: p, start: s}, nil
}

// Process is the run's fold of its process, as of its last write.
func (run *Run) Process() *Process { return run.p }

// Attempt is the run's attempt number, from 1.
func (run *Run) Attempt() int { return run.start.Attempt }

// Token is the run's fencing token.
func (run *Run) Token() uint64 { return run.start.Token }

// Registration is what the process runs.
func (run *Run) Registration() Registration { return run.p.Registration }

func (run *Run) write(ctx context.Context, e Event) (*Event, bool, error) {
	e.Token = run.start.Token
	return run.r.Append(ctx, run.p.ID, e, run.p)
}

// Emit appends an event of a declared type (or waiting, resumed). key,
// if not empty, makes it idempotent.
func (run *Run) Emit(ctx context.Context, typ, key string, data any) (*Event, error) {
	var raw json.RawMessage
	if data != nil {
		var err error
		if raw, err = json.Marshal(data); err != nil {
			return nil, fmt.Errorf("%w: event data: %v", ErrInvalid, err)
		}
	}
	e, _, err := run.write(ctx, Event{Type: typ, Key: key, Data: raw})
	return e, err
}

// Complete ends the process with result, any JSON value.
func (run *Run) Complete(ctx context.Context, result json.RawMessage) (*Event, error) {
	e, _, err := run.write(ctx, Event{Type: TypeCompleted, Data: result})
	return e, err
}

// Fail ends the process as failed.
func (run *Run) Fail(ctx context.Context, f Failure) (*Event, error) {
	if len(f.Code) > MaxTypeBytes || len(f.Message) > MaxTextBytes {
		f.Message = clipText(f.Message)
		f.Code = clip(f.Code)
	}
	e, _, err := run.write(ctx, Event{Type: TypeFailed, Data: jsonData(f)})
	return e, err
}

// Cancelled ends the process as cancelled, as its cancel request asked.
func (run *Run) Cancelled(ctx context.Context, reason string) (*Event, error) {
	e, _, err := run.write(ctx, Event{Type: TypeCancelled, Data: jsonData(Request{Reason: clipText(reason)})})
	return e, err
}

// Drained ends the run's owner-bound process as abandoned by its own
// node, which is shutting down: the work was started and will not be
// run again.
func (run *Run) Drained(ctx context.Context) (*Event, error) {
	o := run.start.Owner
	e, _, err := run.write(ctx, Event{Type: TypeAbandoned, Data: jsonData(Abandonment{Writer: OwnerDrain, Owner: &o, Evidence: "the owner's node drained"})})
	return e, err
}

// Release hands the run's attempt back unfinished (its node drains, or
// the work failed for the moment): the process may run again, here or on
// any node, as its next attempt. Owner-bound work is never released.
func (run *Run) Release(ctx context.Context) (*Event, error) {
	e, _, err := run.write(ctx, Event{Type: TypeReleased})
	return e, err
}

// Refresh reads what others appended since the run's last write (a
// cancel request, say).
func (run *Run) Refresh(ctx context.Context) error { return run.r.catchUp(ctx, run.p) }

func clipText(s string) string {
	if len(s) <= MaxTextBytes {
		return s
	}
	return s[:MaxTextBytes-3] + "..."
}
