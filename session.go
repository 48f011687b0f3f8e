package lash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/turn"
)

// Session is one conversation. Any node may run it; one at a time does.
type Session struct {
	n  *Node
	id string
}

// Session returns the session with id.
func (n *Node) Session(id string) *Session { return &Session{n: n, id: id} }

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Send appends input to the session, durably: from its return on, the input
// is consumed by exactly one turn, whatever happens to the nodes. key is the
// client's idempotency key: sending again with the same key within the
// dedupe window returns the same revision with duplicate set.
func (s *Session) Send(ctx context.Context, key string, in Input) (seq uint64, duplicate bool, err error) {
	data, err := json.Marshal(in)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	if _, err := parseInput(data); err != nil {
		return 0, false, err
	}
	if len(in.Decisions) > 0 {
		// A decision must name a call the session holds suspended; the
		// machine would only pass over one that does not.
		st, err := s.load(ctx)
		if err != nil {
			return 0, false, err
		}
		for _, d := range in.Decisions {
			known := false
			for _, c := range st.suspended {
				known = known || c.Call.ID == d.CallID
			}
			if !known && s.n.opts.machine.DecisionWait > 0 {
				// A running turn may hold the call parked in its decision
				// wait, committed nowhere yet.
				if known, err = sessionRunning(ctx, s.n.leases, s.id); err != nil {
					return 0, false, err
				}
			}
			if !known {
				return 0, false, fmt.Errorf("%w: decision %q: session %s has no suspended call %q", ErrBadInput, d.ID, s.id, d.CallID)
			}
		}
	}
	return s.n.log.AppendInput(ctx, s.id, key, data)
}

// Decide sends a decision for a suspended tool call; key is its idempotency
// key.
func (s *Session) Decide(ctx context.Context, key string, d Decision) (uint64, error) {
	seq, _, err := s.Send(ctx, key, Input{Decisions: []Decision{d}})
	return seq, err
}

// Cancel asks the session's running turn to stop at its next safe boundary.
func (s *Session) Cancel(ctx context.Context, key string) (uint64, error) {
	seq, _, err := s.Send(ctx, key, Input{Cancel: true})
	return seq, err
}

// Transcript is the session's committed conversation, read from its log.
func (s *Session) Transcript(ctx context.Context) ([]turn.Message, error) {
	st, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	return st.history, nil
}

// state is a session as its committed log leaves it.
type state struct {
	rev       uint64 // the last revision read
	history   []turn.Message
	suspended []turn.SuspendedCall
	cursor    uint64
	turns     map[string]uint64 // committed turn id -> revision
	usage     turn.Usage
}

// load folds the session's log. A read of one subject goes at least
// through the leader's last message (streams.Read), so it sees every commit
// acknowledged before the call, even on a lagging follower. It reads the
// whole log: the projection takes this over for long sessions.
func (s *Session) load(ctx context.Context) (*state, error) { return s.fold(ctx) }

// loadThrough is load, refusing a fold that stops before revision rev: a
// driver that missed a commit before its own fence would run that turn
// again.
func (s *Session) loadThrough(ctx context.Context, rev uint64) (*state, error) {
	st, err := s.fold(ctx)
	if err == nil && st.rev < rev {
		err = fmt.Errorf("lash: session %s: log read stops at %d, before %d", s.id, st.rev, rev)
	}
	return st, err
}

func (s *Session) fold(ctx context.Context) (*state, error) {
	st := &state{turns: map[string]uint64{}}
	_, err := s.n.log.ReadEntries(ctx, s.id, 0, func(seq uint64, e *sessionlog.Entry) error {
		st.rev = seq
		if e.Kind != sessionlog.KindCommit {
			return nil
		}
		b, err := sessionlog.DecodeTurnBody(e.Body)
		if err != nil {
			return fmt.Errorf("session %s revision %d: %w", s.id, seq, err)
		}
		st.apply(e.Turn, seq, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (st *state) apply(turnID string, seq uint64, b *sessionlog.TurnBody) {
	st.turns[turnID] = seq
	st.history = append(st.history, b.Outcome.Messages...)
	st.suspended = b.Outcome.Suspended
	st.cursor = max(st.cursor, b.InputCursor)
	st.usage = st.usage.Add(b.Outcome.Usage)
}

// errStop ends a read early.
var errStop = errors.New("stop")
