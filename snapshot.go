package lash

import (
	"bytes"
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

// stateSnapshot is a state as a snapshot holds it: no maps. A snapshot is
// written as snapshotOut and read as stateSnapshot: the same fields, with
// the history and the keys already encoded.
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
	Agent     string               `msgpack:"agent,omitempty"`
}

type snapshotOut struct {
	Rev       uint64               `msgpack:"rev"`
	Newest    uint64               `msgpack:"new"`
	History   msgpack.RawMessage   `msgpack:"hist"`
	Digest    turn.Digest          `msgpack:"dig"`
	Suspended []turn.SuspendedCall `msgpack:"susp"`
	Cursor    uint64               `msgpack:"cur"`
	Turns     int                  `msgpack:"turns"`
	Usage     turn.Usage           `msgpack:"use"`
	Keys      msgpack.RawMessage   `msgpack:"keys"`
	Attempts  int                  `msgpack:"att"`
	Settings  []byte               `msgpack:"set,omitempty"`
	Agent     string               `msgpack:"agent,omitempty"`
	// msgs and keys count the elements of History and Keys.
	msgs, keys int
}

type keySnapshot struct {
	Key  string   `msgpack:"k"`
	Seq  uint64   `msgpack:"s"`
	Hash [32]byte `msgpack:"h"`
}

// snapEncoding is what a session's snapshots repeat, encoded once: the
// first n messages of the history and the first nkeys input keys, each
// element after the other, without the array's header. Both only grow, so
// a snapshot encodes what came since the last one and copies the rest,
// instead of encoding a history however long again.
type snapEncoding struct {
	n, nkeys   int
	hist, keys []byte
}

// takeState is what a snapshot of st holds, with the history and keys
// encoded up to now (what is new since st's last snapshot is encoded here,
// the rest was before). It shares st's slices: the encodings and the
// history are only appended to, and the others are replaced, never
// changed in place, so a later turn leaves the snapshot as it was.
func takeState(st *state) (*snapshotOut, error) {
	enc, added := st.enc, st.newKeys
	if enc == nil {
		// The first snapshot since the state was made: every key, in an
		// order that does not depend on the map's.
		enc = &snapEncoding{}
		added = make([]keySnapshot, 0, len(st.keys))
		for k, u := range st.keys {
			added = append(added, keySnapshot{Key: k, Seq: u.seq, Hash: u.hash})
		}
		slices.SortFunc(added, func(a, b keySnapshot) int { return strings.Compare(a.Key, b.Key) })
	}
	hist, err := appendEncoded(enc.hist, st.history[enc.n:])
	if err != nil {
		return nil, err
	}
	keys, err := appendEncoded(enc.keys, added)
	if err != nil {
		return nil, err
	}
	st.size += int64(len(hist) - len(enc.hist) + len(keys) - len(enc.keys))
	st.enc = &snapEncoding{n: len(st.history), nkeys: enc.nkeys + len(added), hist: hist, keys: keys}
	st.newKeys = nil
	return &snapshotOut{Rev: st.rev, Newest: st.newest, History: hist[:len(hist):len(hist)], Digest: st.digest,
		Suspended: st.suspended, Cursor: st.cursor, Turns: st.turns, Usage: st.usage,
		Keys: keys[:len(keys):len(keys)], Attempts: st.attempts, Settings: st.lastSettings,
		Agent: st.agent, msgs: st.enc.n, keys: st.enc.nkeys}, nil
}

// appendEncoded appends the msgpack encoding of each of vs to b.
func appendEncoded[T any](b []byte, vs []T) ([]byte, error) {
	if len(vs) == 0 {
		return b, nil
	}
	w := bytes.NewBuffer(b)
	enc := msgpack.NewEncoder(w)
	for i := range vs {
		if err := enc.Encode(&vs[i]); err != nil {
			return b, err
		}
	}
	return w.Bytes(), nil
}

// encode writes the snapshot, with the arrays' headers before the
// elements encoded in takeState. The copy of the elements costs in
// proportion to the history, and runs beside the session's next turn.
func (ss *snapshotOut) encode() ([]byte, error) {
	out := *ss
	out.History, out.Keys = withArrayHeader(ss.History, ss.msgs), withArrayHeader(ss.Keys, ss.keys)
	return msgpack.Marshal(&out)
}

func withArrayHeader(elems []byte, n int) msgpack.RawMessage {
	var head bytes.Buffer
	_ = msgpack.NewEncoder(&head).EncodeArrayLen(n) // a bytes.Buffer takes every write
	return append(head.Bytes(), elems...)
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
	st.lastSettings, st.agent = ss.Settings, ss.Agent
	for _, k := range ss.Keys {
		st.keys[k.Key] = keyUse{seq: k.Seq, hash: k.Hash}
		st.size += keyBytes(k.Key)
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
	// A snapshot written in the background can land after the session
	// was deleted and its snapshots purged: it is of the deleted session.
	if deleted, err := s.deletedSince(ctx, st.rev); err != nil || deleted {
		s.n.opts.logger.Warn("session snapshot passed over: its log is read from the start", "session", s.id, "deleted since", deleted, "err", err)
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
	ss, err := takeState(st)
	if err != nil {
		<-n.snapshots
		n.opts.logger.Warn("session snapshot not encoded", "session", s.id, "err", err)
		return
	}
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
