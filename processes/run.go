package processes

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lash-run/lash/leases"
)

// Run is one attempt at a process by the holder of its lease. Every event
// it writes carries the lease's token, so once a newer holder started
// another attempt (or recovery ended the process) its writes are refused
// with ErrFenced or ErrTerminal: it must stop.
type Run struct {
	r     *Registry
	lease *leases.Lease
	p     *Process
	start *Event
}

// Start begins an attempt at the process under l, its lease (claimed with
// leases.Key("proc", id)), by appending its started event. It refuses
// ended processes, externally owned ones, and owner-bound ones that
// started before.
func (r *Registry) Start(ctx context.Context, id string, l *leases.Lease) (*Run, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: Start needs the process's lease", ErrInvalid)
	}
	if !l.Valid(r.now()) {
		return nil, fmt.Errorf("process %s: %w", clip(id), leases.ErrLost)
	}
	p, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.startOn(ctx, p, l, nil)
}

// startOn is Start on the caller's fold of the process, which the
// compare-and-set of the started event proves current or brings up to
// date; guard, if not nil, may refuse the start on the fold brought up to
// date.
func (r *Registry) startOn(ctx context.Context, p *Process, l *leases.Lease, guard func(*Process) error) (*Run, error) {
	if !l.Valid(r.now()) {
		return nil, fmt.Errorf("process %s: %w", clip(p.ID), leases.ErrLost)
	}
	e, _, err := r.appendWith(ctx, p.ID, p, func(p *Process) (Event, error) {
		if guard != nil {
			if err := guard(p); err != nil {
				return Event{}, err
			}
		}
		s := Start{Owner: OwnerOf(l.Owner), Attempt: p.Attempts() + 1, Token: l.Token}
		return Event{Type: TypeStarted, Token: l.Token, Data: jsonData(s)}, nil
	})
	if err != nil {
		return nil, err
	}
	return &Run{r: r, lease: l, p: p, start: e}, nil
}

// Process is the run's fold of its process, as of its last write.
func (run *Run) Process() *Process { return run.p }

// Attempt is the run's attempt number, from 1.
func (run *Run) Attempt() int {
	var s Start
	_ = json.Unmarshal(run.start.Data, &s)
	return s.Attempt
}

// Registration is what the process runs.
func (run *Run) Registration() Registration { return run.p.Registration }

func (run *Run) write(ctx context.Context, e Event) (*Event, bool, error) {
	if !run.lease.Valid(run.r.now()) {
		return nil, false, fmt.Errorf("process %s: %w", clip(run.p.ID), leases.ErrLost)
	}
	e.Token = run.lease.Token
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
	o := OwnerOf(run.lease.Owner)
	e, _, err := run.write(ctx, Event{Type: TypeAbandoned, Data: jsonData(Abandonment{Writer: OwnerDrain, Owner: &o, Evidence: "the owner's node drained"})})
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
