package sessionlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/streams"
)

// Errors. Conflicts from the stream (a lost compare-and-set) are
// streams.ErrConflict.
var (
	// ErrFenced: a holder with an equal or newer fencing token has written
	// to the log; the caller's lease is gone.
	ErrFenced = errors.New("sessionlog: fenced out by a newer lease holder")
	// ErrCommitConflict: the turn was already committed with other content.
	ErrCommitConflict = errors.New("sessionlog: turn already committed with different content")
	// ErrMalformed: a log message is not an entry this version can read.
	ErrMalformed = errors.New("sessionlog: malformed entry")
	// ErrInvalid: the caller's arguments cannot be written.
	ErrInvalid = errors.New("sessionlog: invalid argument")
)

// FencedError says who fenced the caller out.
type FencedError struct {
	Session string
	Token   uint64 // the caller's token
	Holder  uint64 // the token found on the log
	Seq     uint64 // where it was found
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("sessionlog: session %s: token %d is fenced out by token %d at revision %d", e.Session, e.Token, e.Holder, e.Seq)
}

func (e *FencedError) Unwrap() error { return ErrFenced }

// CommitConflictError carries both stamps.
type CommitConflictError struct {
	Session string
	Seq     uint64
	Have    Stamp
	Want    Stamp
}

func (e *CommitConflictError) Error() string {
	return fmt.Sprintf("sessionlog: session %s: turn %s was committed at revision %d with hash %x, not %x",
		e.Session, e.Have.Turn, e.Seq, e.Have.Hash[:8], e.Want.Hash[:8])
}

func (e *CommitConflictError) Unwrap() error { return ErrCommitConflict }

// Store is what the log needs from the stream layer.
type Store interface {
	Append(ctx context.Context, p streams.Publication, expect uint64) (uint64, bool, error)
	Publish(ctx context.Context, p streams.Publication) (uint64, bool, error)
	Head(ctx context.Context, subject string) (*streams.Msg, error)
	NextOnSubject(ctx context.Context, subject string, seq uint64) (*streams.Msg, error)
	NextOnSubjects(ctx context.Context, subjects []string, seq uint64) (*streams.Msg, error)
	Read(ctx context.Context, filter string, from uint64, fn func(*streams.Msg) error) error
	ReadSubjects(ctx context.Context, filters []string, from uint64, fn func(*streams.Msg) error) error
	PurgeBefore(ctx context.Context, subject string, seq uint64) error
	Subjects() streams.Subjects
	// Verify vouches for a record (streams.Client.Verify).
	Verify(m *streams.Msg) error
}

// Log reads and writes session logs.
type Log struct {
	s        Store
	blobs    *blobs.Store
	settings []byte
}

// Option configures a Log.
type Option func(*Log)

// WithBlobs keeps commit bodies above the store's inline size in it, by
// reference, and reads them back. Without it every body is inline.
func WithBlobs(b *blobs.Store) Option { return func(l *Log) { l.blobs = b } }

// WithSettings stamps fences and commits with the fingerprint of the
// writer's turn settings (32 bytes).
func WithSettings(fingerprint []byte) Option { return func(l *Log) { l.settings = fingerprint } }

// Stamped is l stamping its writes with the fingerprint of other turn
// settings: one node runs turns under several (one per agent version).
func (l *Log) Stamped(fingerprint []byte) *Log {
	c := *l
	c.settings = fingerprint
	return &c
}

// New returns a Log over s.
func New(s Store, opts ...Option) *Log {
	l := &Log{s: s}
	for _, o := range opts {
		o(l)
	}
	return l
}

// BodyOwner owns the bodies of a session's commits and consumes kept by
// reference: they go with the session.
func BodyOwner(session string) blobs.Owner {
	return blobs.Owner{Kind: blobs.KindBody, Session: session}
}

// SnapshotOwner owns a session's snapshots kept by reference.
func SnapshotOwner(session string) blobs.Owner {
	return blobs.Owner{Kind: blobs.KindSnapshot, Session: session}
}

// Body returns an entry of session's log's body, reading it from the
// object store when it is kept by reference.
func (l *Log) Body(ctx context.Context, session string, e *Entry) ([]byte, error) {
	if !e.ByRef() {
		return e.Body, nil
	}
	if l.blobs == nil {
		return nil, fmt.Errorf("sessionlog: %s %s keeps its body by reference (%s), and this log reads no object store", e.Kind, e.Turn, e.BodyRef())
	}
	return l.blobs.Get(ctx, BodyOwner(session), e.BodyRef())
}

// Head is the last entry of a session log. Seq is 0 and Entry nil for an
// empty log.
type Head struct {
	Seq   uint64
	Entry *Entry
}

// Head reads the session's head: its revision and last entry.
func (l *Log) Head(ctx context.Context, session string) (Head, error) {
	subj, err := l.s.Subjects().SessionEvents(session)
	if err != nil {
		return Head{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	m, err := l.s.Head(ctx, subj)
	if errors.Is(err, streams.ErrNotFound) {
		return Head{}, nil
	}
	if err != nil {
		return Head{}, err
	}
	e, err := l.decode(m)
	if err != nil {
		return Head{}, fmt.Errorf("session %s revision %d: %w", session, m.Seq, err)
	}
	return Head{Seq: m.Seq, Entry: e}, nil
}

// Position is where a lease holder stands on a session log: the revision
// of its own last write and the fencing token it writes under. Only Fence
// and Commit make one, so a holder can only ever append after its own
// writes: a head written by anyone else fails the compare-and-set.
type Position struct {
	session string
	subject string
	seq     uint64
	token   uint64
}

// Session is the log the position is on.
func (p Position) Session() string { return p.session }

// Seq is the revision of the holder's last write.
func (p Position) Seq() uint64 { return p.seq }

// Token is the holder's fencing token.
func (p Position) Token() uint64 { return p.token }

// Fence appends a fence marker for the holder of token, on the head it
// reads. It fails with a *FencedError if the head was written under a newer
// token, and with streams.ErrConflict if another write lands between the
// read and the append (read the head and try again). A head written under
// the same token is the holder's own write (a retry after a lost ack, or a
// fence after its own commits): Fence returns it as the position.
func (l *Log) Fence(ctx context.Context, session string, token uint64, owner string) (Position, error) {
	if token == 0 {
		return Position{}, fmt.Errorf("%w: fencing token 0", ErrInvalid)
	}
	subj, err := l.s.Subjects().SessionEvents(session)
	if err != nil {
		return Position{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	head, err := l.Head(ctx, session)
	if errors.Is(err, ErrMalformed) {
		// Someone published what lash never writes. The compare-and-set
		// still fences; the newest token comes from the entries before it.
		head, err = l.lastReadable(ctx, subj)
	}
	if err != nil {
		return Position{}, err
	}
	var newest uint64
	if head.Entry != nil {
		newest = head.Entry.Token
	}
	return l.fence(ctx, session, subj, token, owner, head.Seq, newest)
}

// FenceAfter is Fence on a log the caller has read: rev is the head it
// read and newest the newest token among the entries through rev. It saves
// reading the head again; a write since the caller's read is
// streams.ErrConflict, and the caller reads again. setAside lists entries
// the caller passed over (Entry.SetAside; the first MaxSetAside are kept).
func (l *Log) FenceAfter(ctx context.Context, session string, token uint64, owner string, rev, newest uint64, setAside ...uint64) (Position, error) {
	if token == 0 {
		return Position{}, fmt.Errorf("%w: fencing token 0", ErrInvalid)
	}
	subj, err := l.s.Subjects().SessionEvents(session)
	if err != nil {
		return Position{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return l.fence(ctx, session, subj, token, owner, rev, newest, setAside[:min(len(setAside), MaxSetAside)]...)
}

func (l *Log) fence(ctx context.Context, session, subj string, token uint64, owner string, rev, newest uint64, setAside ...uint64) (Position, error) {
	switch {
	case newest > token:
		return Position{}, &FencedError{Session: session, Token: token, Holder: newest, Seq: rev}
	case newest == token && rev > 0:
		return Position{session: session, subject: subj, seq: rev, token: token}, nil
	}
	data, err := encodeEntry(&Entry{Kind: KindFence, Token: token, Owner: owner, Settings: l.settings, SetAside: setAside})
	if err != nil {
		return Position{}, err
	}
	seq, _, err := l.append(ctx, streams.Publication{Subject: subj, Data: data, MsgID: msgID(subj, "fence", strconv.FormatUint(token, 10))}, rev)
	if err != nil {
		return Position{}, err
	}
	return Position{session: session, subject: subj, seq: seq, token: token}, nil
}

// Refence appends the holder's fence again right after its own position:
// a run that goes on to the next input after a commit or a consume marks
// that it began that turn, as a new holder's fence does.
func (l *Log) Refence(ctx context.Context, pos Position, owner string) (Position, error) {
	if pos.token == 0 || pos.subject == "" {
		return Position{}, fmt.Errorf("%w: a fence needs a position from Fence or Commit", ErrInvalid)
	}
	data, err := encodeEntry(&Entry{Kind: KindFence, Token: pos.token, Owner: owner, Settings: l.settings})
	if err != nil {
		return Position{}, err
	}
	id := strconv.FormatUint(pos.token, 10) + "@" + strconv.FormatUint(pos.seq, 10)
	seq, _, err := l.append(ctx, streams.Publication{Subject: pos.subject, Data: data, MsgID: msgID(pos.subject, "fence", id)}, pos.seq)
	if err != nil {
		return Position{}, err
	}
	return Position{session: pos.session, subject: pos.subject, seq: seq, token: pos.token}, nil
}

// lastReadable reads the whole log for the newest token among the entries
// it can decode, and returns it with the revision of the log's head. Only a
// log whose head is malformed takes this path.
func (l *Log) lastReadable(ctx context.Context, subj string) (Head, error) {
	var h Head
	err := l.s.Read(ctx, subj, 0, func(m *streams.Msg) error {
		h.Seq = m.Seq
		if e, err := l.decode(m); err == nil && (h.Entry == nil || e.Token >= h.Entry.Token) {
			h.Entry = e
		}
		return nil
	})
	return h, err
}

// decode reads the entry in m: one the deployment did not sign (when it
// signs, ADR 0036) is malformed too, as nothing a node wrote.
func (l *Log) decode(m *streams.Msg) (*Entry, error) {
	if err := l.s.Verify(m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return decodeEntry(m.Data)
}

// msgID scopes a msg id to one session's subject: JetStream dedupes msg
// ids across the whole stream.
func msgID(subject, kind, id string) string { return kind + ":" + subject + ":" + id }

// append appends p expecting the subject's head at expect (fenceGuard).
func (l *Log) append(ctx context.Context, p streams.Publication, expect uint64) (uint64, bool, error) {
	if !fenceGuard {
		p.MsgID += "#" + strconv.FormatInt(time.Now().UnixNano(), 10)
		return l.s.Publish(ctx, p)
	}
	return l.s.Append(ctx, p, expect)
}

// Commit appends a turn's commit after the holder's position and returns
// the holder's new position. Of racing commits on one position exactly one
// lands; the others get streams.ErrConflict and change nothing. A retry of
// the same stamp returns the position of the original commit, also after
// the dedupe window, because the commit that landed is the entry right
// after the position. The same turn with another body is a
// *CommitConflictError; an entry after the position written under a newer
// token is a *FencedError.
//
// A turn committed earlier than the position (by an older holder, found
// within the dedupe window) is reported committed and the holder's position
// is returned unchanged. Commit finds an earlier commit of the same turn
// only right after the position or, within the dedupe window, anywhere. After fencing, a new
// holder finds what older holders committed with FindCommit before
// committing a turn it recovers.
func (l *Log) Commit(ctx context.Context, pos Position, turn string, body []byte) (Position, error) {
	return l.write(ctx, pos, KindCommit, turn, body)
}

// Consume appends a consume entry after the holder's position: inputs
// consumed without a turn, identified by id. It is idempotent by id and
// body as Commit is by turn and body.
func (l *Log) Consume(ctx context.Context, pos Position, id string, body []byte) (Position, error) {
	return l.write(ctx, pos, KindConsume, id, body)
}

func (l *Log) write(ctx context.Context, pos Position, kind Kind, turn string, body []byte) (Position, error) {
	session, subj, token, expect := pos.session, pos.subject, pos.token, pos.seq
	if token == 0 || subj == "" || turn == "" {
		return Position{}, fmt.Errorf("%w: a %s needs an id and a position from Fence or Commit", ErrInvalid, kind)
	}
	at := func(seq uint64) Position { return Position{session: session, subject: subj, seq: seq, token: token} }
	want := &Entry{Kind: kind, Token: token, Turn: turn, Hash: ContentHash(body), Body: body, Settings: l.settings}
	if l.blobs != nil && !l.blobs.Limits().InlineSize(len(body)) {
		// The object goes first: an entry never names what is not stored.
		if _, err := l.blobs.Put(ctx, BodyOwner(session), body); err != nil {
			return Position{}, err
		}
		want.Body, want.BodySize = nil, int64(len(body))
	}
	data, err := encodeEntry(want)
	if err != nil {
		return Position{}, err
	}
	seq, dup, err := l.append(ctx, streams.Publication{Subject: subj, Data: data, MsgID: msgID(subj, kind.String(), turn)}, expect)
	if err == nil && !dup {
		return at(seq), nil
	}
	if err == nil {
		// An earlier commit of this turn: make sure it has this content.
		// It may lie before the position (another holder committed it
		// before this one fenced); the holder's position does not go back.
		if err := l.sameCommit(ctx, session, subj, seq, want); err != nil {
			return Position{}, err
		}
		return at(max(seq, expect)), nil
	}
	if !errors.Is(err, streams.ErrConflict) {
		return Position{}, err
	}
	next, rerr := l.s.NextOnSubject(ctx, subj, expect+1)
	if rerr != nil {
		if errors.Is(rerr, streams.ErrNotFound) {
			return Position{}, err
		}
		return Position{}, rerr
	}
	have, derr := l.decode(next)
	switch {
	case derr != nil:
		return Position{}, fmt.Errorf("session %s revision %d: %w", session, next.Seq, derr)
	case have.Kind == kind && have.Turn == turn:
		if have.Hash != want.Hash {
			return Position{}, &CommitConflictError{Session: session, Seq: next.Seq, Have: have.Stamp(), Want: want.Stamp()}
		}
		return at(next.Seq), nil
	case have.Token > token:
		return Position{}, &FencedError{Session: session, Token: token, Holder: have.Token, Seq: next.Seq}
	}
	return Position{}, err
}

func (l *Log) sameCommit(ctx context.Context, session, subj string, seq uint64, want *Entry) error {
	m, err := l.s.NextOnSubject(ctx, subj, seq)
	if err != nil {
		return err
	}
	have, err := l.decode(m)
	if err != nil {
		return fmt.Errorf("session %s revision %d: %w", session, m.Seq, err)
	}
	if m.Seq != seq || have.Kind != want.Kind || have.Turn != want.Turn {
		return fmt.Errorf("sessionlog: session %s: revision %d is not the %s of %s", session, seq, want.Kind, want.Turn)
	}
	if have.Hash != want.Hash {
		return &CommitConflictError{Session: session, Seq: seq, Have: have.Stamp(), Want: want.Stamp()}
	}
	return nil
}

// Read calls fn for each entry of the session log from revision from on, in
// order, up to the head when Read started.
func (l *Log) Read(ctx context.Context, session string, from uint64, fn func(seq uint64, e *Entry) error) error {
	subj, err := l.s.Subjects().SessionEvents(session)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return l.s.Read(ctx, subj, from, func(m *streams.Msg) error {
		e, err := l.decode(m)
		if err != nil {
			return fmt.Errorf("session %s revision %d: %w", session, m.Seq, err)
		}
		return fn(m.Seq, e)
	})
}

// ReadEntries is Read passing over messages that are not entries (nothing
// lash wrote): a stray publish on a log must not make its session unreadable.
// last is the revision of the last message read, entry or not (the head a
// compare-and-set must name); skipped counts the messages passed over.
func (l *Log) ReadEntries(ctx context.Context, session string, from uint64, fn func(seq uint64, e *Entry) error) (last uint64, skipped int, err error) {
	subj, err := l.s.Subjects().SessionEvents(session)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	err = l.s.Read(ctx, subj, from, func(m *streams.Msg) error {
		last = m.Seq
		e, derr := l.decode(m)
		if derr != nil {
			skipped++
			return nil
		}
		return fn(m.Seq, e)
	})
	return last, skipped, err
}

// FindCommit returns the revision and entry of turn's commit at or after
// revision from, or streams.ErrNotFound. Messages that are not entries
// (nothing lash wrote) are passed over.
func (l *Log) FindCommit(ctx context.Context, session, turn string, from uint64) (uint64, *Entry, error) {
	subj, err := l.s.Subjects().SessionEvents(session)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var seq uint64
	var found *Entry
	errFound := errors.New("found")
	err = l.s.Read(ctx, subj, from, func(m *streams.Msg) error {
		e, err := l.decode(m)
		if err == nil && e.Kind == KindCommit && e.Turn == turn {
			seq, found = m.Seq, e
			return errFound
		}
		return nil
	})
	switch {
	case errors.Is(err, errFound):
		return seq, found, nil
	case err != nil:
		return 0, nil, err
	}
	return 0, nil, fmt.Errorf("%w: no commit of turn %s in session %s", streams.ErrNotFound, turn, session)
}
