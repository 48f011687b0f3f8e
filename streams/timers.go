package streams

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Timer is a durable timer: a message schedule on the TIMERS stream.
type Timer struct {
	// Subject holds the schedule (Subjects.TimerAt), Target gets the
	// message it fires (Subjects.TimerDue).
	Subject, Target string
	// At fires the timer once, at that time (a time past fires at once).
	// Pattern, if set instead, is a repeating schedule: "@every 5s" (at
	// least a second) or a cron line with seconds ("0 */5 * * * *").
	At      time.Time
	Pattern string
	Data    []byte
	// Replace stores the schedule even when one is there (a changed
	// repeating schedule); otherwise the one there stays.
	Replace bool
}

// Schedule stores t unless a schedule is on its subject already: timers
// are named by what they are for, so arming one twice arms it once. A
// one-shot timer's schedule is removed when it fires; arming it again
// then fires it again.
func (c *Client) Schedule(ctx context.Context, t Timer) (created bool, err error) {
	pattern := t.Pattern
	if pattern == "" {
		// Schedules have whole seconds: round up, never fire early.
		at := t.At.UTC()
		if at.Nanosecond() != 0 {
			at = at.Truncate(time.Second).Add(time.Second)
		}
		pattern = "@at " + at.Format(time.RFC3339)
	}
	h := nats.Header{}
	h.Set(jetstream.ScheduleHeader, pattern)
	h.Set(jetstream.ScheduleTargetHeader, t.Target)
	p := Publication{Subject: t.Subject, Data: t.Data, Header: h}
	if t.Replace {
		_, _, err = c.Publish(ctx, p)
		return err == nil, err
	}
	_, _, err = c.Append(ctx, p, 0)
	var ce *ConflictError
	if errors.As(err, &ce) {
		return false, nil
	}
	return err == nil, err
}

// Unschedule removes the schedule on subject, if any.
func (c *Client) Unschedule(ctx context.Context, subject string) error {
	return c.Purge(ctx, subject)
}
