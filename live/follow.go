package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lash-run/lash/streams"
)

// BehindError: the events after a watcher's sequence are not all kept any
// more (dropped for age or size, or the stream was made anew, as a memory
// stream is when its server restarts). Follow again from First-1 to read
// what is kept, knowing some is missing; the session log holds the facts.
type BehindError struct {
	After uint64 // the sequence asked to follow after
	First uint64 // the first sequence the stream keeps
	Last  uint64 // the last one it holds
}

func (e *BehindError) Error() string {
	if e.After > e.Last {
		return fmt.Sprintf("live: sequence %d is past the stream's last (%d): the stream was made anew, events after %d may be gone", e.After, e.Last, e.After)
	}
	return fmt.Sprintf("live: events after %d are no longer all kept (the stream keeps %d on)", e.After, e.First)
}

// Record is an event with its stream sequence, the cursor to follow after.
type Record struct {
	Seq   uint64
	Event Event
}

// Follow calls fn with each live event of session after sequence after (0
// for all that are kept), in order, and then with each new one as it
// comes, until ctx ends or fn returns an error (returned as it is). A
// message that is no event is handed over with Type "unreadable" and the
// reason in Error, not dropped.
func Follow(ctx context.Context, c *streams.Client, session string, after uint64, fn func(Record) error) error {
	subj, err := c.Subjects().Live(session)
	if err != nil {
		return err
	}
	if after > 0 {
		first, last, err := c.Bounds(ctx, streams.Live)
		if err != nil {
			return err
		}
		if after+1 < first || after > last {
			return &BehindError{After: after, First: first, Last: last}
		}
	}
	err = c.Tail(ctx, streams.Live, []string{subj}, after+1, func(m *streams.Msg, _ uint64) error {
		var ev Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			ev = Event{Type: "unreadable", Session: session, At: m.Time, Error: err.Error()}
		}
		return fn(Record{Seq: m.Seq, Event: ev})
	})
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}
