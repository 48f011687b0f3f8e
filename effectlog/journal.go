package effectlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
	"github.com/oklog/ulid/v2"
)

// Errors.
var (
	// ErrNondeterminism: a recorded effect's request hash differs from the
	// current one. The turn took another path than when it was recorded; it
	// must stop, never run the effect again. Its text carries the stable
	// code "lash:nondeterminism".
	ErrNondeterminism = errors.New("lash:nondeterminism: recorded effect does not match the current request")
	// ErrNotRecorded: no outcome is recorded for the key.
	ErrNotRecorded = errors.New("effectlog: not recorded")
	// ErrMalformed: a journal message is not a record this version reads.
	ErrMalformed = errors.New("effectlog: malformed record")
	// ErrInvalid: the key cannot be journaled (missing ids).
	ErrInvalid = errors.New("effectlog: invalid key")
)

// NondeterminismError carries the key and both hashes.
type NondeterminismError struct {
	Key      turn.ReplayKey
	Recorded turn.Hash
	Current  turn.Hash
}

func (e *NondeterminismError) Error() string {
	return fmt.Sprintf("lash:nondeterminism: effect %s was recorded with request hash %s, the turn now asks with %s",
		e.Key, e.Recorded, e.Current)
}

func (e *NondeterminismError) Unwrap() error { return ErrNondeterminism }

// Store is what the journal needs from the stream layer.
type Store interface {
	Append(ctx context.Context, p streams.Publication, expect uint64) (uint64, bool, error)
	Publish(ctx context.Context, p streams.Publication) (uint64, bool, error)
	NextOnSubject(ctx context.Context, subject string, seq uint64) (*streams.Msg, error)
	Read(ctx context.Context, filter string, from uint64, fn func(*streams.Msg) error) error
	Purge(ctx context.Context, filter string) error
	Subjects() streams.Subjects
	// Verify vouches for a record (streams.Client.Verify).
	Verify(m *streams.Msg) error
}

// Journal records and replays effect outcomes.
type Journal struct {
	s        Store
	recorder string
	now      func() time.Time
	blobs    *blobs.Store
	settings []byte
}

// Option configures a Journal.
type Option func(*Journal)

// WithRecorder names the node or process that records, for operators. Each
// concurrent recorder needs its own name. Default: a unique name.
func WithRecorder(name string) Option { return func(j *Journal) { j.recorder = name } }

// WithBlobs keeps outcomes above the store's inline size in it, by
// reference, and reads them back. Without it every outcome is inline.
func WithBlobs(b *blobs.Store) Option { return func(j *Journal) { j.blobs = b } }

// WithSettings stamps records with the fingerprint of the recorder's turn
// settings, so a node tells a turn begun under other settings.
func WithSettings(fingerprint []byte) Option { return func(j *Journal) { j.settings = fingerprint } }

// Stamped is j stamping its records with the fingerprint of other turn
// settings: one node runs turns under several (one per agent version).
func (j *Journal) Stamped(fingerprint []byte) *Journal {
	c := *j
	c.settings = fingerprint
	return &c
}

// New returns a journal over s.
func New(s Store, opts ...Option) *Journal {
	j := &Journal{s: s, now: time.Now}
	for _, o := range opts {
		o(j)
	}
	if j.recorder == "" {
		// Recorder names scope msg-id dedupe to one journal's own retries.
		j.recorder = "journal-" + ulid.Make().String()
	}
	return j
}

func (j *Journal) subjects(key turn.ReplayKey) (record, intent string, err error) {
	if record, err = j.recordSubject(key); err != nil {
		return "", "", err
	}
	intent, err = j.s.Subjects().EffectIntent(key.Session, key.Turn, uint64(key.Effect), key.Call)
	return record, intent, err
}

// recordSubject is the subject of key's record alone, for the writes and
// reads that need no intent's.
func (j *Journal) recordSubject(key turn.ReplayKey) (string, error) {
	if key.Effect == 0 {
		return "", fmt.Errorf("%w: effect id 0 in %s", ErrInvalid, key)
	}
	subj, err := j.s.Subjects().EffectRecord(key.Session, key.Turn, uint64(key.Effect), key.Call)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return subj, nil
}

// RecordOwner owns the payloads of a turn's records kept by reference: they
// go with the turn's journal.
func RecordOwner(key turn.ReplayKey) blobs.Owner {
	return blobs.Owner{Kind: blobs.KindRecord, Session: key.Session, Turn: key.Turn}
}

// Record journals the outcome of the effect at key, if no outcome is
// recorded yet: the first writer wins, forever. It returns the record that
// stands, with won false when another writer's came first. If the standing
// record was made for another request hash, it returns a
// *NondeterminismError instead.
func (j *Journal) Record(ctx context.Context, key turn.ReplayKey, hash turn.Hash, out Outcome) (rec *Record, won bool, err error) {
	subj, err := j.recordSubject(key)
	if err != nil {
		return nil, false, err
	}
	at := j.now()
	var ref *blobs.Ref
	if j.blobs != nil && !j.blobs.Limits().InlineSize(len(out.Data)) {
		// The object goes first: a record never names what is not stored.
		r, err := j.blobs.Put(ctx, RecordOwner(key), out.Data)
		if err != nil {
			return nil, false, err
		}
		ref = &r
	}
	data, err := encode(key, hash, out, ref, j.recorder, j.settings, at)
	if err != nil {
		return nil, false, err
	}
	// The id dedupes this recorder's own retries only; other recorders
	// race through the compare-and-set and read the winner.
	msgID := "fx:" + j.recorder + ":" + subj
	seq, dup, err := j.s.Append(ctx, streams.Publication{Subject: subj, Data: data, MsgID: msgID}, 0)
	if err == nil && !dup {
		return &Record{Key: key, Hash: hash, Outcome: out, Seq: seq, Recorder: j.recorder, At: at, Ref: ref, Settings: j.settings}, true, nil
	}
	if err != nil && !errors.Is(err, streams.ErrConflict) {
		return nil, false, err
	}
	// Someone recorded first (or this write landed before a lost ack):
	// the first message on the subject is the record.
	rec, err = j.first(ctx, subj, key, hash)
	if err != nil {
		return nil, false, err
	}
	return rec, dup, nil
}

// Lookup returns the recorded outcome for key, ErrNotRecorded, or a
// *NondeterminismError when the record was made for another request.
func (j *Journal) Lookup(ctx context.Context, key turn.ReplayKey, hash turn.Hash) (*Record, error) {
	subj, err := j.recordSubject(key)
	if err != nil {
		return nil, err
	}
	return j.first(ctx, subj, key, hash)
}

func (j *Journal) first(ctx context.Context, subj string, key turn.ReplayKey, hash turn.Hash) (*Record, error) {
	m, err := j.s.NextOnSubject(ctx, subj, 1)
	if errors.Is(err, streams.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotRecorded, key)
	}
	if err != nil {
		return nil, err
	}
	rec, err := j.decode(m)
	if err != nil {
		return nil, err
	}
	if rec.Hash != hash {
		return nil, &NondeterminismError{Key: key, Recorded: rec.Hash, Current: hash}
	}
	return rec, j.resolve(ctx, rec)
}

// decode reads the record in m: one the deployment did not sign (when it
// signs, ADR 0036) is malformed, written by no run.
func (j *Journal) decode(m *streams.Msg) (*Record, error) {
	if err := j.s.Verify(m); err != nil {
		return nil, fmt.Errorf("%w: record %d: %v", ErrMalformed, m.Seq, err)
	}
	return decode(m.Data, m.Seq)
}

// resolve reads the data of an outcome kept by reference.
func (j *Journal) resolve(ctx context.Context, rec *Record) error {
	if rec.Ref == nil {
		return nil
	}
	if j.blobs == nil {
		return fmt.Errorf("%w: record %d keeps its outcome by reference (%s), and this journal reads no object store", ErrMalformed, rec.Seq, rec.Ref)
	}
	data, err := j.blobs.Get(ctx, RecordOwner(rec.Key), *rec.Ref)
	if err != nil {
		return fmt.Errorf("effectlog: record %d: %w", rec.Seq, err)
	}
	rec.Outcome.Data = data
	return nil
}

// Load returns every record of one turn, in the order they were recorded.
func (j *Journal) Load(ctx context.Context, session, turnID string) ([]*Record, error) {
	filter, err := j.s.Subjects().TurnRecords(session, turnID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var out []*Record
	err = j.s.Read(ctx, filter, 0, func(m *streams.Msg) error {
		rec, err := j.decode(m)
		if err != nil {
			return err
		}
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, rec := range out {
		if err := j.resolve(ctx, rec); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Intent is an attempt a run noted as started (Started).
type Intent struct {
	Effect uint64
	Call   string
	// Recorder is the run that started it; At is when the server stored
	// the intent.
	Recorder string
	At       time.Time
}

// Intents lists the intents of a turn in the order they were written.
func (j *Journal) Intents(ctx context.Context, session, turnID string) ([]Intent, error) {
	filter, err := j.s.Subjects().TurnIntents(session, turnID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var out []Intent
	err = j.s.Read(ctx, filter, 0, func(m *streams.Msg) error {
		// <prefix>.fx.<session>.<turn>.<effect>.<call or _>.i
		tok := strings.Split(m.Subject, ".")
		if len(tok) < 4 {
			return nil
		}
		effect, err := strconv.ParseUint(tok[len(tok)-3], 10, 64)
		if err != nil {
			return nil // not an intent this version writes
		}
		call := ""
		if c := tok[len(tok)-2]; c != "_" {
			if call, err = streams.ParseToken(c); err != nil {
				return nil
			}
		}
		out = append(out, Intent{Effect: effect, Call: call, Recorder: string(m.Data), At: m.Time})
		return nil
	})
	return out, err
}

// Started notes that an attempt of the effect at key is about to run. A
// re-executor that finds an intent without a record knows an earlier
// attempt may have run: the effect is "in doubt".
func (j *Journal) Started(ctx context.Context, key turn.ReplayKey, attempt int) error {
	_, subj, err := j.subjects(key)
	if err != nil {
		return err
	}
	_, _, err = j.s.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(j.recorder),
		MsgID: fmt.Sprintf("intent:%d:%s", attempt, subj)})
	return err
}

// InDoubt reports whether an attempt was started for key without an outcome
// being recorded: an intent was written for it, or the call belongs to the
// batch right after an outcome that Intends it.
func (j *Journal) InDoubt(ctx context.Context, key turn.ReplayKey) (bool, error) {
	rsubj, isubj, err := j.subjects(key)
	if err != nil {
		return false, err
	}
	if _, err := j.s.NextOnSubject(ctx, rsubj, 1); err == nil {
		return false, nil
	} else if !errors.Is(err, streams.ErrNotFound) {
		return false, err
	}
	_, err = j.s.NextOnSubject(ctx, isubj, 1)
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, streams.ErrNotFound):
		return false, err
	case key.Call == "" || key.Effect <= 1:
		return false, nil
	}
	cause, err := j.recordSubject(turn.ReplayKey{Session: key.Session, Turn: key.Turn, Effect: key.Effect - 1})
	if err != nil {
		return false, err
	}
	m, err := j.s.NextOnSubject(ctx, cause, 1)
	if errors.Is(err, streams.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	rec, err := j.decode(m)
	if err != nil {
		return false, err
	}
	return rec.Outcome.Intends, nil
}

// Drop deletes a journal for good: the objects that the records on records
// (a filter: Subjects.SessionRecords, TurnRecords) keep by reference, then
// every message on purge (SessionEffects, TurnEffects). It returns the
// objects and bytes it deleted. An unreadable record holds no reference
// this version can follow; it goes with the rest.
func (j *Journal) Drop(ctx context.Context, records, purge string) (objects int, bytes int64, err error) {
	if j.blobs != nil {
		var refs []*Record
		err = j.s.Read(ctx, records, 0, func(m *streams.Msg) error {
			if rec, err := j.decode(m); err == nil && rec.Ref != nil {
				refs = append(refs, rec)
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		for _, rec := range refs {
			n, err := j.blobs.Delete(ctx, RecordOwner(rec.Key), *rec.Ref)
			if err != nil {
				return objects, bytes, err
			}
			if n > 0 {
				objects++
				bytes += n
			}
		}
	}
	return objects, bytes, j.s.Purge(ctx, purge)
}
