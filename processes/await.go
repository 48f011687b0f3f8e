package processes

import (
	"context"
	"errors"
	"fmt"

	"github.com/lash-run/lash/streams"
)

var errEnded = errors.New("ended")

// Await waits until the process has ended and returns it, or until ctx
// ends. It reads the process's log as it stands (on one server one batched
// direct get, so an ended process costs one round trip), then follows it
// through a consumer that delivers each event as it is stored, so a
// terminal written while Await starts is seen. Beside a running Worker,
// which follows every process already, it is told the end by the worker
// instead (watched before the read, so no end falls between), and does
// not read the log at all when the worker holds the process as not ended
// (one registered here a moment ago, say). An id
// nobody registered is ErrUnknown at once, and so is one pruned while
// awaited.
func (r *Registry) Await(ctx context.Context, id string) (*Process, error) {
	subj, err := r.subject(id)
	if err != nil {
		return nil, err
	}
	var told <-chan *Process
	if w := r.worker.Load(); w != nil {
		end, stop, ok, open := w.watch(id)
		if ok {
			defer stop()
			told = end
		}
		if open {
			if ended, err := waitTold(ctx, told); ended != nil || err != nil {
				return ended, err
			}
			told = nil // the worker stopped telling: read and follow the log
		}
	}
	p := &Process{ID: id}
	var head uint64
	fold := func(m *streams.Msg) error {
		e, signed, err := signedEvent(r.s, m)
		if err != nil {
			return fmt.Errorf("process %s: %w", clip(id), err)
		}
		if !signed {
			return nil
		}
		return p.apply(e)
	}
	err = r.s.Read(ctx, subj, 1, func(m *streams.Msg) error { head = m.Seq; return fold(m) })
	switch {
	case err != nil:
		return nil, err
	case head == 0:
		return nil, fmt.Errorf("%w: %s", ErrUnknown, clip(id))
	case p.End != nil:
		return p, nil
	}
	if told != nil {
		if ended, err := waitTold(ctx, told); ended != nil || err != nil {
			return ended, err
		}
		// The worker stopped telling: follow the log from the start.
		p, head = &Process{ID: id}, 0
	}
	// A prune mark newer than the log read says the process was pruned
	// since: its events will not come.
	gone, err := r.s.Subjects().ProcessGone(id)
	if err != nil {
		return nil, err
	}
	err = r.s.Tail(ctx, streams.Processes, []string{subj, gone}, head+1, func(m *streams.Msg, _ uint64) error {
		if m.Subject == gone {
			return fmt.Errorf("%w: %s was pruned while awaited", ErrUnknown, clip(id))
		}
		if err := fold(m); err != nil {
			return err
		}
		if p.End != nil {
			return errEnded
		}
		return nil
	})
	if errors.Is(err, errEnded) {
		return p, nil
	}
	return nil, err
}

// waitTold waits for the worker to tell the end; nil and no error when it
// stopped telling.
func waitTold(ctx context.Context, told <-chan *Process) (*Process, error) {
	select {
	case ended := <-told:
		return ended, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
