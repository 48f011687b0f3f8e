package sessionlog

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/streams"
	"github.com/vmihailenco/msgpack/v5"
)

// A snapshot is a session's state as its log leaves it through one
// revision, encoded by the caller. Snapshots are derived data: any node
// that folded the log through Rev writes the same one, so they need no
// fence, and a reader that cannot use one folds the log instead.
type Snapshot struct {
	Rev  uint64
	Data []byte
}

// snapshotMsg is a snapshot on the wire: its state inline, or in the
// object store under Hash when large.
type snapshotMsg struct {
	Rev  uint64   `msgpack:"r"`
	Hash [32]byte `msgpack:"h"`
	Size int64    `msgpack:"z,omitempty"`
	Data []byte   `msgpack:"d,omitempty"`
}

// PutSnapshot stores snap as the session's newest snapshot and drops the
// older ones.
func (l *Log) PutSnapshot(ctx context.Context, session string, snap Snapshot) error {
	subj, err := l.s.Subjects().SessionSnapshots(session)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	m := snapshotMsg{Rev: snap.Rev, Hash: sha256.Sum256(snap.Data), Data: snap.Data}
	// The snapshot this one replaces, whose object goes with it.
	prev, hadPrev, err := SnapshotRef(ctx, l.s, session)
	if err != nil {
		return err
	}
	if l.blobs != nil && !l.blobs.Limits().InlineSize(len(snap.Data)) {
		if _, err := l.blobs.Put(ctx, SnapshotOwner(session), snap.Data); err != nil {
			return err
		}
		m.Data, m.Size = nil, int64(len(snap.Data))
	}
	data, err := msgpack.Marshal(&m)
	if err != nil {
		return err
	}
	seq, _, err := l.s.Publish(ctx, streams.Publication{Subject: subj, Data: data, MsgID: msgID(subj, "snap", strconv.FormatUint(snap.Rev, 10))})
	if err != nil {
		return err
	}
	if err := l.s.PurgeBefore(ctx, subj, seq); err != nil {
		return err
	}
	// A reader that took the old snapshot just before finds its object
	// gone and folds the log instead, as with any snapshot it cannot use.
	if hadPrev && prev.Sum != m.Hash && l.blobs != nil {
		if _, err := l.blobs.Delete(ctx, SnapshotOwner(session), prev); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotRef is the reference to the session's snapshot when it is kept
// in the object store (ok false otherwise, or when there is none).
func SnapshotRef(ctx context.Context, s interface {
	Subjects() streams.Subjects
	Head(ctx context.Context, subject string) (*streams.Msg, error)
}, session string) (ref blobs.Ref, ok bool, err error) {
	subj, err := s.Subjects().SessionSnapshots(session)
	if err != nil {
		return blobs.Ref{}, false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	msg, err := s.Head(ctx, subj)
	if errors.Is(err, streams.ErrNotFound) {
		return blobs.Ref{}, false, nil
	}
	if err != nil {
		return blobs.Ref{}, false, err
	}
	var m snapshotMsg
	if msgpack.Unmarshal(msg.Data, &m) != nil || m.Size == 0 {
		return blobs.Ref{}, false, nil
	}
	return blobs.Ref{Sum: m.Hash, Size: m.Size}, true, nil
}

// LastSnapshot returns the session's newest snapshot, or
// streams.ErrNotFound. One that cannot be read is an error wrapping
// ErrMalformed or a blobs error.
func (l *Log) LastSnapshot(ctx context.Context, session string) (Snapshot, error) {
	subj, err := l.s.Subjects().SessionSnapshots(session)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	msg, err := l.s.Head(ctx, subj)
	if err != nil {
		return Snapshot{}, err
	}
	if err := l.s.Verify(msg); err != nil {
		return Snapshot{}, fmt.Errorf("%w: snapshot at %d: %v", ErrMalformed, msg.Seq, err)
	}
	var m snapshotMsg
	if err := msgpack.Unmarshal(msg.Data, &m); err != nil || m.Rev == 0 {
		return Snapshot{}, fmt.Errorf("%w: snapshot at %d: %v", ErrMalformed, msg.Seq, err)
	}
	data := m.Data
	if m.Size > 0 {
		if l.blobs == nil {
			return Snapshot{}, errors.New("sessionlog: a snapshot kept by reference, and this log reads no object store")
		}
		if data, err = l.blobs.Get(ctx, SnapshotOwner(session), blobs.Ref{Sum: m.Hash, Size: m.Size}); err != nil {
			return Snapshot{}, err
		}
	}
	if sha256.Sum256(data) != m.Hash {
		return Snapshot{}, fmt.Errorf("%w: snapshot at %d does not match its hash", ErrMalformed, msg.Seq)
	}
	return Snapshot{Rev: m.Rev, Data: data}, nil
}
