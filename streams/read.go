package streams

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Read calls fn, in stream order, for every message that matches filter
// (which may hold wildcards) with sequence at least from, until it has
// caught up with the messages stored. An error from fn stops the read and
// is returned as it is. Messages removed while it reads (purged, expired,
// fired schedules) end it too: after readIdle with nothing delivered it
// asks the leader whether anything follows, so it never waits for a
// message that is gone.
//
// On a stream that answers direct gets (ADR 0033), a read of one subject
// without wildcards is batched direct gets: one round trip for up to 256
// messages. Otherwise Read goes through a consumer, which on a replicated
// stream may run on a follower a moment behind the leader. Read asks the
// leader first whether anything follows from (no consumer when nothing
// does). For filters without wildcards it then asks for each subject's
// last message and reads at least through it; a wildcard read, when the
// consumer has nothing more, asks the leader whether anything follows
// the last message read. Either way a read sees every message stored
// before the call. Decide writes with Head and NextOnSubject, which ask
// the leader.
func (c *Client) Read(ctx context.Context, filter string, from uint64, fn func(*Msg) error) error {
	return c.ReadSubjects(ctx, []string{filter}, from, fn)
}

// ReadSubjects is Read over several filters of one stream, merged in
// stream order.
func (c *Client) ReadSubjects(ctx context.Context, filters []string, from uint64, fn func(*Msg) error) error {
	if len(filters) == 0 {
		return nil
	}
	st, err := c.streamOf(filters[0])
	if err != nil {
		return err
	}
	if name, ok := direct(st); ok && len(filters) == 1 && !strings.ContainsAny(filters[0], "*>") {
		next, err := c.directRead(ctx, st, name, filters[0], from, fn)
		if !errors.Is(err, errDirectOff) {
			return err
		}
		from = next
	}
	// A consumer with nothing to deliver would wait: look first. For exact
	// subjects the leader's last messages both say whether there is
	// anything to read and how far to read.
	var through uint64
	if slices.ContainsFunc(filters, func(f string) bool { return strings.ContainsAny(f, "*>") }) {
		// How far the leader has is learned at the end, when the
		// consumer runs dry: one round trip either way.
		through = math.MaxUint64
		if _, err := c.NextOnSubjects(ctx, filters, from); errors.Is(err, ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
	} else {
		// Most reads find nothing after from (a checkpoint's look at the
		// inputs): the leader says so without sending a message back.
		if _, err := c.NextOnSubjects(ctx, filters, from); errors.Is(err, ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		heads, err := each(filters, func(f string) (*Msg, error) { return c.Head(ctx, f) })
		if err != nil {
			return err
		}
		found := false
		for _, h := range heads {
			if h != nil {
				found, through = true, max(through, h.Seq)
			}
		}
		if !found || through < from {
			return nil
		}
	}
	return c.readTail(ctx, st, filters, from, through, fn)
}

// readTail reads what ReadSubjects found there is to read: from from on,
// at least through through (past the end for a wildcard read, which
// ends when the leader has nothing after the last message read).
func (c *Client) readTail(ctx context.Context, st jetstream.Stream, filters []string, from, through uint64, fn func(*Msg) error) error {
	// A message found before can be gone before the consumer delivers it
	// (a fired schedule, a purge), and then nothing more comes: the
	// consumer would wait for ever. While no message arrives, the leader
	// is asked now and then whether anything follows the last one read.
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var last, seen atomic.Uint64 // last sequence read; messages read
	last.Store(max(from, 1) - 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(readIdle)
		defer t.Stop()
		prev := uint64(0)
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if n := seen.Load(); n != prev {
				prev = n
				continue
			}
			if _, err := c.NextOnSubjects(tctx, filters, last.Load()+1); errors.Is(err, ErrNotFound) {
				cancel(errCaughtUp)
				return
			}
		}
	}()
	err := c.tail(tctx, st, filters, from, func(m *Msg, pending uint64) error {
		last.Store(m.Seq)
		seen.Add(1)
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
		if _, err := c.NextOnSubjects(ctx, filters, m.Seq+1); errors.Is(err, ErrNotFound) {
			return errCaughtUp
		} else if err != nil {
			return err
		}
		return nil
	})
	if errors.Is(err, context.Canceled) && ctx.Err() == nil && errors.Is(context.Cause(tctx), errCaughtUp) {
		return nil // the rest was gone before it was delivered
	}
	return err
}

// readIdle is how long a read waits for its next message before it asks
// the leader whether one follows.
const readIdle = 2 * time.Second

// NextOnSubjects returns the first message on any of subjects with
// sequence at least seq, or ErrNotFound: one leader read per subject, all
// at once.
func (c *Client) NextOnSubjects(ctx context.Context, subjects []string, seq uint64) (*Msg, error) {
	if len(subjects) == 1 {
		return c.NextOnSubject(ctx, subjects[0], seq)
	}
	found, err := each(subjects, func(s string) (*Msg, error) { return c.NextOnSubject(ctx, s, seq) })
	if err != nil {
		return nil, err
	}
	var first *Msg
	for _, m := range found {
		if m != nil && (first == nil || m.Seq < first.Seq) {
			first = m
		}
	}
	if first == nil {
		return nil, fmt.Errorf("%w: no message on %s", ErrNotFound, strings.Join(subjects, ", "))
	}
	return first, nil
}

// each runs get for every subject at once, the last on the caller's
// goroutine; ErrNotFound leaves a nil.
func each(subjects []string, get func(string) (*Msg, error)) ([]*Msg, error) {
	out := make([]*Msg, len(subjects))
	if len(subjects) == 0 {
		return out, nil
	}
	errs := make([]error, len(subjects))
	one := func(i int) {
		out[i], errs[i] = get(subjects[i])
		if errors.Is(errs[i], ErrNotFound) {
			errs[i] = nil
		}
	}
	var wg sync.WaitGroup
	for i := range len(subjects) - 1 {
		wg.Go(func() { one(i) })
	}
	one(len(subjects) - 1)
	wg.Wait()
	return out, errors.Join(errs...)
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
	if err := c.purge(ctx, st, subject, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seq)); err != nil {
		return fmt.Errorf("streams: purge %s before %d: %w", subject, seq, err)
	}
	return nil
}

func (c *Client) purge(ctx context.Context, st jetstream.Stream, subject string, opts ...jetstream.StreamPurgeOpt) error {
	if c.cfg.Intercept != nil {
		_, err := intercepted(c, ctx, Call{Op: "purge", Subject: subject}, func(ctx context.Context) (none, error) {
			return only(st.Purge(ctx, opts...))
		})
		return err
	}
	return st.Purge(ctx, opts...)
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
	if err := c.purge(ctx, st, filter, jetstream.WithPurgeSubject(filter)); err != nil {
		return fmt.Errorf("streams: purge %s: %w", filter, err)
	}
	return nil
}
