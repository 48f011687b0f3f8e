package lash

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
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

// Send appends input to the session, durably: a message to its input
// subject, decisions or a cancel to its decision subject (an input with
// both is refused). From its return on, the input
// is consumed by exactly one turn, whatever happens to the nodes. key is the
// client's idempotency key, at most streams.MaxIDBytes: an input with a key
// the session has seen is not run again. Sent again with the same content
// it returns the first input's revision with duplicate set (within
// JetStream's dedupe window, or once the node's projection holds the first;
// otherwise it is appended and consumed as a duplicate, without a turn). Sent
// with other content it is a *KeyConflictError (ErrKeyConflict).
func (s *Session) Send(ctx context.Context, key string, in Input) (seq uint64, duplicate bool, err error) {
	n := s.n
	if err := streams.CheckID(s.id); err != nil {
		return 0, false, fmt.Errorf("%w: session: %v", ErrBadInput, err)
	}
	if err := streams.CheckID(key); err != nil {
		return 0, false, fmt.Errorf("%w: idempotency key: %v", ErrBadInput, err)
	}
	data, err := json.Marshal(in)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	if in.Text != "" && in.Decides() {
		return 0, false, fmt.Errorf("%w: a message and decisions or a cancel go in separate inputs: they have separate subjects", ErrBadInput)
	}
	if _, err := parseInput(data, in.Decides()); err != nil {
		return 0, false, err
	}
	if limit := n.MaxInputBytes(); len(data) > limit {
		return 0, false, fmt.Errorf("%w: input of %d bytes, at most %d", ErrBadInput, len(data), limit)
	}
	hash := sha256.Sum256(data)
	if n.proj != nil {
		// A key the projection holds consumed needs no append.
		if first, ok, err := n.proj.InputKey(s.id, key); err == nil && ok {
			if first.Hash != hash {
				return 0, false, &KeyConflictError{Session: s.id, Key: key, Seq: first.Seq}
			}
			return first.Seq, true, nil
		}
	}
	if in.Agent != "" {
		// Named agents are checked before the append: a name with no
		// agent behind it writes nothing.
		if _, err := n.lookupAgent(ctx, in.Agent); errors.Is(err, agents.ErrNotFound) || errors.Is(err, agents.ErrInvalid) {
			return 0, false, fmt.Errorf("%w: no agent %s on the deployment (lash-admin agents ls)", ErrBadInput, in.Agent)
		} else if err != nil {
			return 0, false, err
		}
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
			if !known {
				// A running turn may hold the call parked in its decision
				// wait (the node's or its agent's), committed nowhere yet.
				if known, err = sessionRunning(ctx, n.leases, s.id); err != nil {
					return 0, false, err
				}
			}
			if !known {
				return 0, false, fmt.Errorf("%w: decision %q: session %s has no suspended call %q", ErrBadInput, d.ID, s.id, d.CallID)
			}
		}
	}
	appendTo := n.log.AppendInput
	switch {
	case in.Decides():
		appendTo = n.log.AppendDecision
	case in.Notice != "" || strings.Contains(in.Agent, "@"):
		// Notices and pins come from nodes and operators: signed.
		appendTo = func(ctx context.Context, session, key string, data []byte) (uint64, bool, error) {
			return n.log.AppendVouched(ctx, session, key, data, n.client.Vouch)
		}
	}
	seq, duplicate, err = appendTo(ctx, s.id, key, data)
	if errors.Is(err, streams.ErrTooLarge) {
		return 0, false, fmt.Errorf("%w: input of %d bytes with its headers is over the deployment's limit of %d", ErrBadInput, len(data), n.MaxInputBytes())
	}
	if err != nil || !duplicate {
		return seq, duplicate, err
	}
	// JetStream deduped it within its window: by key alone.
	first, err := n.log.InputAt(ctx, s.id, seq)
	if errors.Is(err, streams.ErrNotFound) {
		// The window outlives a purge: the input with this key went
		// with its deleted session, and the key is not free again yet.
		return 0, false, fmt.Errorf("%w: idempotency key %q was taken by input %d, since deleted with its session; within the stream's dedupe window (%v) the key takes nothing: use another",
			ErrBadInput, key, seq, n.client.Config().DuplicateWindow)
	}
	if err != nil {
		return 0, false, err
	}
	if sha256.Sum256(first.Data) != hash {
		return 0, false, &KeyConflictError{Session: s.id, Key: key, Seq: seq}
	}
	return seq, true, nil
}

// MaxInputBytes is the deployment's limit on one input message, headers
// included: the SESSIONS stream refuses larger ones.
func (n *Node) MaxInputBytes() int { return int(n.client.Config().MaxInputBytes) }

// ErrKeyConflict: an idempotency key was used before for other content.
var ErrKeyConflict = errors.New("lash: idempotency key used for other content")

// KeyConflictError names the key and the input that used it first.
type KeyConflictError struct {
	Session string
	Key     string
	Seq     uint64
}

func (e *KeyConflictError) Error() string {
	return fmt.Sprintf("lash: session %s: idempotency key %q was used by input %d for other content", e.Session, e.Key, e.Seq)
}

func (e *KeyConflictError) Unwrap() error { return ErrKeyConflict }

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
	return st.history[:len(st.history):len(st.history)], nil
}

// state is a session as its committed log leaves it.
type state struct {
	id      string
	rev     uint64 // the last revision read (the head a fence names)
	newest  uint64 // the newest fencing token among the entries read
	history []turn.Message
	// frame is the array history lives in, from one element before it
	// (turn.Start.Frame), while it does.
	frame     []turn.Message
	digest    turn.Digest // of history
	suspended []turn.SuspendedCall
	cursor    uint64
	turns     int // committed
	// lastSettings is the settings fingerprint of the last commit or
	// consume.
	lastSettings []byte
	// agent is the agent the session is bound to ("name" or "name@N");
	// empty for the deployment's default.
	agent string
	// since counts the entries folded since the last snapshot.
	since int
	// size is about what history (and its encoding for snapshots) and the
	// remembered keys take in memory.
	size  int64
	usage turn.Usage
	// keys are the idempotency keys of every input consumed, forever.
	keys map[string]keyUse
	// enc is what the last snapshot encoded, and newKeys the keys
	// remembered since (kept only once there is an enc).
	enc     *snapEncoding
	newKeys []keySnapshot
	// attempts counts fences since the last commit or consume: runs that
	// began the next turn and did not finish it.
	attempts int
	// runs names the runs that fenced since the last commit or consume,
	// at revision settled: only they record the next turn's effects.
	runs    []string
	settled uint64
	// setAside are entries this node passed over as no lease's, for its
	// next fence to record (sessionlog.Entry.SetAside).
	setAside []uint64
}

// fresh reports whether the next turn's journal is known to be empty: no
// run fenced since the last commit or consume, and that entry was written
// under the turn settings given (by a node of this version, which fences
// again when it goes on after its own commit, sessionlog.Refence). Only a
// run that fenced after them records effects for the next turn. A log
// with nothing on it is fresh too: every run fences before it records,
// and the log is never purged.
func (st *state) fresh(settings []byte) bool {
	return st.attempts == 0 && (st.rev == 0 || bytes.Equal(st.lastSettings, settings))
}

// keyUse is the first input that used a key.
type keyUse struct {
	seq  uint64
	hash [32]byte
}

// load folds the session's log after its newest snapshot. A read of one subject goes at least
// through the leader's last message (streams.Read), so it sees every commit
// acknowledged before the call, even on a lagging follower.
func (s *Session) load(ctx context.Context) (*state, error) {
	st := s.fromSnapshot(ctx)
	if err := s.fold(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// fold brings st (the session's state through st.rev) up to the log's
// head: it reads only the entries after st.rev, so a state a
// run kept costs one read of the head when nothing was written since. Each
// entry moves st.rev as it is applied, so st stays a fold of its log
// through st.rev even when the read fails part way.
func (s *Session) fold(ctx context.Context, st *state) error {
	f := logFolder{log: s.n.log, ceiling: s.n.ceiling, commit: s.body, consume: s.consumeBody,
		passed: func(seq uint64, e *sessionlog.Entry) {
			// No lease ever had this token: not a node's entry. Passing
			// it over keeps it from fencing every node out (ADR 0027).
			s.n.opts.logger.Error("session log entry passed over: its fencing token is above every lease's", "session", s.id,
				"revision", seq, "kind", e.Kind, "token", e.Token, "owner", e.Owner)
			s.n.observe(Event{Kind: EventInputRefused, Session: s.id, Err: fmt.Errorf("%w: log entry %d with token %d, above every lease's", ErrBadInput, seq, e.Token)})
		}}
	return f.fold(ctx, s.id, st)
}

// body reads a commit's body. A body that can never be read (its object
// lost, or bytes this version cannot decode) is passed over, so that the
// session goes on: the turn's messages are missing from the history, and the
// cursor moves past the input the turn was named after. The projection sets
// the commit aside where operators look.
func (s *Session) body(ctx context.Context, seq uint64, e *sessionlog.Entry) (*sessionlog.TurnBody, error) {
	data, err := s.n.log.Body(ctx, s.id, e)
	if lostBody(err) {
		data = nil
	} else if err != nil {
		return nil, err
	}
	b, derr := sessionlog.DecodeTurnBody(data)
	if err == nil && derr == nil {
		return b, nil
	}
	s.n.opts.logger.Error("turn passed over: its commit cannot be read", "session", s.id, "turn", e.Turn, "revision", seq,
		"err", errors.Join(err, derr))
	if in, ok := inputOfTurn(e.Turn); ok {
		return &sessionlog.TurnBody{Outcome: turn.Outcome{Status: turn.StatusDone}, InputCursor: in}, nil
	}
	return nil, nil
}

// consumeBody reads a consume's body. One that can never be read is passed
// over like a commit's: the cursor moves past the input the consume is
// named after, whose key is then not remembered.
func (s *Session) consumeBody(ctx context.Context, seq uint64, e *sessionlog.Entry) (*sessionlog.ConsumeBody, error) {
	data, err := s.n.log.Body(ctx, s.id, e)
	if lostBody(err) {
		data = nil
	} else if err != nil {
		return nil, err
	}
	b, derr := sessionlog.DecodeConsumeBody(data)
	if err == nil && derr == nil {
		return b, nil
	}
	s.n.opts.logger.Error("session log entry passed over: its consume cannot be read", "session", s.id, "revision", seq,
		"err", errors.Join(err, derr))
	if in, ok := inputOfTurn(e.Turn); ok {
		return &sessionlog.ConsumeBody{InputCursor: in}, nil
	}
	return nil, nil
}

// lostBody tells an entry's body that can never be read (its object lost
// or damaged) from a read that failed for now.
func lostBody(err error) bool {
	return errors.Is(err, blobs.ErrMissing) || errors.Is(err, blobs.ErrCorrupt) || errors.Is(err, blobs.ErrTooLarge)
}

// inputOfTurn is the input a turn's id (or a consume's) is named after.
func inputOfTurn(id string) (uint64, bool) {
	var in uint64
	_, err := fmt.Sscanf(id, "in-%d", &in)
	return in, err == nil
}

func newState(id string) *state {
	return &state{id: id, keys: map[string]keyUse{}}
}

// fenced applies a fence at revision seq by the run owner.
func (st *state) fenced(seq, token uint64, owner string) {
	st.rev, st.newest = seq, max(st.newest, token)
	st.since++
	st.attempts++
	if owner != "" && !slices.Contains(st.runs, owner) {
		st.runs = append(st.runs, owner)
	}
}

// committed applies a turn's commit at revision seq; b is nil for a commit
// that is passed over.
func (st *state) committed(seq, token uint64, settings []byte, b *sessionlog.TurnBody) {
	st.rev, st.newest, st.lastSettings = seq, max(st.newest, token), settings
	st.since++
	st.attempts, st.runs, st.settled = 0, nil, seq
	if b == nil {
		return
	}
	st.turns++
	st.agent = b.Agent
	st.extend(b.Outcome.Messages)
	st.size += messageBytes(b.Outcome.Messages)
	st.digest = st.digest.Extend(b.Outcome.Messages...)
	st.suspended = b.Outcome.Suspended
	st.cursor = max(st.cursor, b.InputCursor)
	st.usage = st.usage.Add(b.Outcome.Usage)
	st.remember(b.Inputs)
}

// consumed applies a consume entry at revision seq; b is nil for one that
// cannot be read.
func (st *state) consumed(seq, token uint64, settings []byte, b *sessionlog.ConsumeBody) {
	st.rev, st.newest, st.lastSettings = seq, max(st.newest, token), settings
	st.since++
	st.attempts, st.runs, st.settled = 0, nil, seq
	if b == nil {
		return
	}
	st.cursor = max(st.cursor, b.InputCursor)
	st.remember(b.Inputs)
}

// remember keeps the keys of consumed inputs; a refused input's key is
// free for a later input, a taken one never is.
func (st *state) remember(uses []sessionlog.InputUse) {
	for _, u := range uses {
		if u.Key == "" || u.Refused != "" {
			continue
		}
		if _, ok := st.keys[u.Key]; !ok {
			st.keys[u.Key] = keyUse{seq: u.Seq, hash: u.Hash}
			st.size += keyBytes(u.Key)
			if st.enc != nil {
				st.newKeys = append(st.newKeys, keySnapshot{Key: u.Key, Seq: u.Seq, Hash: u.Hash})
			}
		}
	}
}

// errStop ends a read early.
var errStop = errors.New("stop")

// plausibleToken reports whether token can be a lease's fencing token
// (ceiling).
func (n *Node) plausibleToken(ctx context.Context, token uint64) (bool, error) {
	return n.ceiling.plausible(ctx, token)
}
