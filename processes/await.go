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
// once. An id nobody registered is ErrUnknown at once.
func (r *Registry) Await(ctx context.Context, id string) (*Process, error) {
	subj, err := r.subject(id)
	if err != nil {
		return nil, err
	}
	if _, err := r.s.Head(ctx, subj); errors.Is(err, streams.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrUnknown, clip(id))
	} else if err != nil {
		return nil, err
	}
	p := &Process{ID: id}
	err = r.s.Tail(ctx, streams.Processes, []string{subj}, 1, func(m *streams.Msg, _ uint64) error {
		e, err := Decode(m.Data, m.Seq)
		if err != nil {
			return fmt.Errorf("process %s: %w", clip(id), err)
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
