package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Read calls fn, in stream order, for every message that matches filter
// (which may hold wildcards) with sequence at least from, until it has
// caught up with the messages stored. An error from fn stops the read and
// is returned as it is.
//
// Read goes through a consumer, which on a replicated stream may run on a
// follower a moment behind the leader. For a filter without wildcards it
// asks the leader for the subject's last message first and reads at least
// through it, so a read sees every message stored before the call; a
// wildcard read may end a moment behind. Decide writes with Head and
// NextOnSubject, which ask the leader.
func (c *Client) Read(ctx context.Context, filter string, from uint64, fn func(*Msg) error) error {
	st, err := c.streamOf(filter)
	if err != nil {
		return err
	}
	// A consumer with nothing to deliver would wait: look first. For one
	// subject the leader's last message both says whether there is
	// anything to read and how far to read.
	var through uint64
	if strings.ContainsAny(filter, "*>") {
		if _, err := c.NextOnSubject(ctx, filter, from); errors.Is(err, ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
	} else {
		last, err := c.Head(ctx, filter)
		if errors.Is(err, ErrNotFound) || err == nil && last.Seq < from {
			return nil
		} else if err != nil {
			return err
		}
		through = last.Seq
	}
	return c.tail(ctx, st, []string{filter}, from, func(m *Msg, pending uint64) error {
		if err := fn(m); err != nil {
			return err
		}
		if pending != 0 {
			return nil
		}
		if m.Seq >= through {
			return errCaughtUp
		}
		// The consumer has nothing more yet: a lagging follower, or the
		// messages up to through are gone (retention). Ask the leader.
		if _, err := c.NextOnSubject(ctx, filter, m.Seq+1); errors.Is(err, ErrNotFound) {
			return errCaughtUp
		} else if err != nil {
			return err
		}
		return nil
	})
}

var errCaughtUp = errors.New("caught up")

// PurgeBefore removes the messages on subject stored before sequence seq.
func (c *Client) PurgeBefore(ctx context.Context, subject string, seq uint64) error {
	st, err := c.streamOf(subject)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seq)); err != nil {
		return fmt.Errorf("streams: purge %s before %d: %w", subject, seq, err)
	}
	return nil
}

// Purge removes every message matching filter, for lifecycle rules such as
// dropping a committed turn's journal.
func (c *Client) Purge(ctx context.Context, filter string) error {
	st, err := c.streamOf(filter)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
		return fmt.Errorf("streams: purge %s: %w", filter, err)
	}
	return nil
}
