package lash

import (
	"context"
	"sync/atomic"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
)

// ceiling tells the log entries a lease could have written from those none
// could (ADR 0027): fencing tokens are lease bucket revisions, so none is
// above the bucket's newest. The revision read is cached and read again
// only for a token above it.
type ceiling struct {
	c   *streams.Client
	rev atomic.Uint64
}

// plausible reports whether token can be a lease's fencing token.
func (k *ceiling) plausible(ctx context.Context, token uint64) (bool, error) {
	if token <= k.rev.Load() {
		return true, nil
	}
	rev, err := k.c.LeaseRevision(ctx)
	if err != nil {
		return false, err
	}
	for {
		cur := k.rev.Load()
		if rev <= cur || k.rev.CompareAndSwap(cur, rev) {
			break
		}
	}
	return token <= rev, nil
}

// logFolder is how a reader folds a session's log: the bodies it reads and
// what it does with what the fold passes over.
type logFolder struct {
	log     *sessionlog.Log
	ceiling *ceiling
	// commit and consume read an entry's body; an error stops the fold.
	commit  func(ctx context.Context, seq uint64, e *sessionlog.Entry) (*sessionlog.TurnBody, error)
	consume func(ctx context.Context, seq uint64, e *sessionlog.Entry) (*sessionlog.ConsumeBody, error)
	// passed, if set, hears of each entry no lease could have written.
	passed func(seq uint64, e *sessionlog.Entry)
	// before, if set, sees each commit before it is applied; an error
	// stops the fold.
	before func(seq uint64, e *sessionlog.Entry, body *sessionlog.TurnBody) error
}

// fold folds the entries of session's log after st.rev into st: the one
// fold of a log, for the driver and verify alike. An entry whose token no
// lease could have had is passed over (st moves past it, and the next fence
// names it set aside); a fence, commit or consume is applied; messages that
// are no entries are passed over.
func (f *logFolder) fold(ctx context.Context, session string, st *state) error {
	last, _, err := f.log.ReadEntries(ctx, session, st.rev+1, func(seq uint64, e *sessionlog.Entry) error {
		if ok, err := f.ceiling.plausible(ctx, e.Token); err != nil {
			return err
		} else if !ok {
			if f.passed != nil {
				f.passed(seq, e)
			}
			st.rev = seq
			st.setAside = append(st.setAside, seq)
			return nil
		}
		switch e.Kind {
		case sessionlog.KindFence:
			st.fenced(seq, e.Token, e.Owner)
		case sessionlog.KindCommit:
			b, err := f.commit(ctx, seq, e)
			if err != nil {
				return err
			}
			if f.before != nil {
				if err := f.before(seq, e, b); err != nil {
					return err
				}
			}
			st.committed(seq, e.Token, e.Settings, b)
		case sessionlog.KindConsume:
			b, err := f.consume(ctx, seq, e)
			if err != nil {
				return err
			}
			st.consumed(seq, e.Token, e.Settings, b)
		default:
			st.rev, st.newest = seq, max(st.newest, e.Token)
			st.since++
		}
		return nil
	})
	if err != nil {
		return err
	}
	st.rev = max(st.rev, last)
	return nil
}
