package processes

import (
	"context"
	"errors"
	"fmt"

	"github.com/lash-run/lash/streams"
)

var errEnded = errors.New("ended")

// Await waits until the process has ended and returns it, or until ctx
// ends. It reads the process's log from its first event through a
// consumer that then delivers each event as it is stored, so a terminal
// written while Await starts is seen, and an ended process returns at
// once. An id nobody registered is ErrUnknown at once, and so is one
// pruned while awaited.
func (r *Registry) Await(ctx context.Context, id string) (*Process, error) {
	subj, err := r.subject(id)
	if err != nil {
		return nil, err
	}
	head, err := r.s.Head(ctx, subj)
	if errors.Is(err, streams.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrUnknown, clip(id))
	} else if err != nil {
		return nil, err
	}
	// A prune mark newer than the head read says the process was pruned
	// since: its events will not come.
	gone, err := r.s.Subjects().ProcessGone(id)
	if err != nil {
		return nil, err
	}
	p := &Process{ID: id}
	err = r.s.Tail(ctx, streams.Processes, []string{subj, gone}, 1, func(m *streams.Msg, _ uint64) error {
		if m.Subject == gone {
			if m.Seq > head.Seq {
				return fmt.Errorf("%w: %s was pruned while awaited", ErrUnknown, clip(id))
			}
			return nil // an earlier process of the same id
		}
		e, signed, err := signedEvent(r.s, m)
		if err != nil {
			return fmt.Errorf("process %s: %w", clip(id), err)
		}
		if !signed {
			return nil
		}
		if err := p.apply(e); err != nil {
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
