package lash

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// snapshotEvery is how many log entries a session gains between snapshots:
// a node that does not keep the session reads its newest snapshot and at
// most about this many entries after it.
const snapshotEvery = 64

// maxSnapshotWrites bounds the snapshots a node writes at once; past it a
// snapshot is left for a later commit.
const maxSnapshotWrites = 4

// stateSnapshot is a state as a snapshot holds it: no maps, so it encodes
// the same way every time.
type stateSnapshot struct {
	Rev       uint64               `msgpack:"rev"`
	Newest    uint64               `msgpack:"new"`
	History   []turn.Message       `msgpack:"hist"`
	Digest    turn.Digest          `msgpack:"dig"`
	Suspended []turn.SuspendedCall `msgpack:"susp"`
	Cursor    uint64               `msgpack:"cur"`
	Turns     int                  `msgpack:"turns"`
	Usage     turn.Usage           `msgpack:"use"`
	Keys      []keySnapshot        `msgpack:"keys"`
	Attempts  int                  `msgpack:"att"`
	Settings  []byte               `msgpack:"set,omitempty"`
}

type keySnapshot struct {
	Key  string   `msgpack:"k"`
	Seq  uint64   `msgpack:"s"`
	Hash [32]byte `msgpack:"h"`
}

// takeState is what a snapshot of st holds. It shares st's slices: the
// history is only appended to, and the others are replaced, never changed
// in place, so a later turn leaves the snapshot as it was.
func takeState(st *state) *stateSnapshot {
	ss := &stateSnapshot{Rev: st.rev, Newest: st.newest, History: st.history[:len(st.history):len(st.history)], Digest: st.digest,
		Suspended: st.suspended, Cursor: st.cursor, Turns: st.turns, Usage: st.usage, Attempts: st.attempts, Settings: st.lastSettings}
	ss.Keys = make([]keySnapshot, 0, len(st.keys))
	for k, u := range st.keys {
		ss.Keys = append(ss.Keys, keySnapshot{Key: k, Seq: u.seq, Hash: u.hash})
	}
	return ss
}

func (ss *stateSnapshot) encode() ([]byte, error) {
	slices.SortFunc(ss.Keys, func(a, b keySnapshot) int { return strings.Compare(a.Key, b.Key) })
	return msgpack.Marshal(ss)
}

func decodeState(id string, data []byte) (*state, error) {
	var ss stateSnapshot
	if err := msgpack.Unmarshal(data, &ss); err != nil {
		return nil, err
	}
	if ss.Rev == 0 || ss.Digest != (turn.Digest{}).Extend(ss.History...) {
		return nil, errors.New("a snapshot whose history does not match its digest")
	}
	st := newState(id)
	st.rev, st.newest, st.history, st.digest, st.suspended = ss.Rev, ss.Newest, ss.History, ss.Digest, ss.Suspended
	st.cursor, st.turns, st.usage, st.attempts = ss.Cursor, ss.Turns, ss.Usage, ss.Attempts
	// Snapshots are taken at a commit; runs that fenced after it are
	// folded from the log.
	st.settled = ss.Rev
	st.size = messageBytes(st.history)
	st.lastSettings = ss.Settings
	for _, k := range ss.Keys {
		st.keys[k.Key] = keyUse{seq: k.Seq, hash: k.Hash}
	}
	return st, nil
}

// fromSnapshot starts a session this node does not keep from its newest
// snapshot, or from nothing when it has none or it cannot be used.
func (s *Session) fromSnapshot(ctx context.Context) *state {
	snap, err := s.n.log.LastSnapshot(ctx, s.id)
	if err != nil {
		if !errors.Is(err, streams.ErrNotFound) {
			s.n.opts.logger.Warn("session snapshot passed over: its log is read from the start", "session", s.id, "err", err)
		}
		return newState(s.id)
	}
	st, err := decodeState(s.id, snap.Data)
	if err != nil {
		s.n.opts.logger.Warn("session snapshot passed over: its log is read from the start", "session", s.id, "err", err)
		return newState(s.id)
	}
	return st
}

// snapshot writes st's snapshot in the background when the session gained
// snapshotEvery entries since the last one.
func (s *Session) snapshot(st *state) {
	n := s.n
	if st.since < snapshotEvery {
		return
	}
	select {
	case n.snapshots <- struct{}{}:
	default:
		return // enough in flight: a later commit writes it
	}
	// Encoding costs in proportion to the history: it runs beside the
	// session's next turn, not before it.
	ss := takeState(st)
	st.since = 0
	n.snapWrites.Add(1)
	go func() {
		defer func() { <-n.snapshots; n.snapWrites.Done() }()
		data, err := ss.encode()
		if err != nil {
			n.opts.logger.Warn("session snapshot not encoded", "session", s.id, "err", err)
			return
		}
		snap := sessionlog.Snapshot{Rev: ss.Rev, Data: data}
		// Derived data: a node that stops gives it up.
		ctx, cancel := context.WithTimeout(n.halt, 30*time.Second)
		defer cancel()
		if err := n.log.PutSnapshot(ctx, s.id, snap); err != nil {
			n.opts.logger.Warn("session snapshot not stored; the next one is", "session", s.id, "revision", snap.Rev, "err", err)
		}
	}()
}
