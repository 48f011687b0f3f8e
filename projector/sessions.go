package projector

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lash-run/lash/blobs"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// SessionsFold is the name of the session read model's fold.
const SessionsFold = "sessions"

// SessionHead is a session as the read model knows it.
type SessionHead struct {
	Session string `msgpack:"id"`
	// Revision is the session log's head revision; Fence the token of the
	// holder that fenced last.
	Revision uint64 `msgpack:"rev"`
	Fence    uint64 `msgpack:"fence"`
	// Turns counts commits; the last one's id and outcome follow.
	Turns       int              `msgpack:"turns"`
	LastTurn    string           `msgpack:"last"`
	Status      turn.RunStatus   `msgpack:"st"`
	Termination turn.Termination `msgpack:"term"`
	Usage       turn.Usage       `msgpack:"use"`
	Messages    int              `msgpack:"msgs"`
	// Inputs counts inputs appended; InputCursor is the last one a commit
	// consumed; PendingInputs those after it.
	Inputs        int    `msgpack:"in"`
	LastInput     uint64 `msgpack:"lin"`
	InputCursor   uint64 `msgpack:"cur"`
	PendingInputs int    `msgpack:"pend"`
	Suspended     int    `msgpack:"susp"`
	// Pending holds the sequences of the inputs after InputCursor.
	Pending []uint64 `msgpack:"pseq,omitempty"`
	// Created and Active are when the session's first and latest message
	// (input or log entry) were stored, by the server's clock.
	Created time.Time `msgpack:"ct"`
	Active  time.Time `msgpack:"at"`
	// Agent is the agent the session is bound to after its last commit
	// ("name" or "name@N"; empty for the default agent); Labels those its
	// first message gave it.
	Agent  string             `msgpack:"ag,omitempty"`
	Labels []sessionlog.Label `msgpack:"lb,omitempty"`
}

// LabelMap is the session's labels as a map (nil for none).
func (h *SessionHead) LabelMap() map[string]string {
	if len(h.Labels) == 0 {
		return nil
	}
	m := make(map[string]string, len(h.Labels))
	for _, l := range h.Labels {
		m[l.Key] = l.Value
	}
	return m
}

// Label is the value of the session's label key, and whether it has it.
func (h *SessionHead) Label(key string) (string, bool) {
	for _, l := range h.Labels {
		if l.Key == key {
			return l.Value, true
		}
	}
	return "", false
}

// TurnInfo is one committed turn.
type TurnInfo struct {
	Turn        string           `msgpack:"t"`
	Ordinal     int              `msgpack:"n"`
	Seq         uint64           `msgpack:"s"`
	Hash        [32]byte         `msgpack:"h"`
	Token       uint64           `msgpack:"k"`
	Status      turn.RunStatus   `msgpack:"st"`
	Termination turn.Termination `msgpack:"term"`
	Usage       turn.Usage       `msgpack:"use"`
	Iterations  int              `msgpack:"it"`
	// FirstMessage and Messages locate the turn's messages in the transcript.
	FirstMessage int `msgpack:"fm"`
	Messages     int `msgpack:"m"`
	// Body is the commit's body as committed: the turn's messages.
	Body msgpack.RawMessage `msgpack:"b"`
	// Settings is the fingerprint of the turn settings the committer ran.
	Settings []byte `msgpack:"v,omitempty"`
	// ByRef is set when the body is kept in the object store.
	ByRef bool `msgpack:"r,omitempty"`
}

// TranscriptEntry is one message of a session's transcript.
type TranscriptEntry struct {
	Index   int          `msgpack:"i"`
	Turn    string       `msgpack:"t"`
	Message turn.Message `msgpack:"m"`
}

// Sessions folds session logs and inputs into heads, turns and transcripts.
// Keys, under the fold's space (<s> is the session's subject token):
//
//	h/<s>                  SessionHead
//	t/<s>/<turn token>     TurnInfo, the commit stamp by turn id, with the
//	                       commit's body: the turn's messages
//	o/<s>/<ordinal>        turn id, in commit order
//	i/<s>/<seq>            an input, by stream sequence
//	k/<s>/<key token>      the first input a consumed key named: its
//	                       sequence and the sha256 of its payload
//
// Inputs a node consumed without a turn because it refused them are set
// aside in the quarantine, with the node's reason.
type Sessions struct {
	prefix     string
	checkInput func(data []byte, decision bool) error
	body       func(session string, e *sessionlog.Entry) ([]byte, error)
}

// SessionsOption configures the Sessions fold.
type SessionsOption func(*Sessions)

// WithInputCheck sets inputs that check refuses aside, with its error as
// the reason, instead of counting them as pending: an operator sees them in
// the quarantine. check must be a pure function of the payload.
func WithInputCheck(check func(data []byte, decision bool) error) SessionsOption {
	return func(f *Sessions) { f.checkInput = check }
}

// WithBodies reads the bodies of entries kept by reference. Without it,
// such an entry is set aside.
func WithBodies(read func(session string, e *sessionlog.Entry) ([]byte, error)) SessionsOption {
	return func(f *Sessions) { f.body = read }
}

// NewSessions folds the session subjects of the deployment with prefix.
func NewSessions(prefix string, opts ...SessionsOption) *Sessions {
	f := &Sessions{prefix: prefix}
	for _, o := range opts {
		o(f)
	}
	return f
}

// Name implements Fold.
func (f *Sessions) Name() string { return SessionsFold }

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func key(parts ...[]byte) []byte {
	var k []byte
	for i, p := range parts {
		if i > 0 {
			k = append(k, '/')
		}
		k = append(k, p...)
	}
	return k
}

// prepared is a session message decoded ahead of applying it.
type prepared struct {
	tok, sid, kind string
	entry          *sessionlog.Entry
	data           []byte // the entry's body, read from the object store if need be
	body           *bodySummary
	consume        *sessionlog.ConsumeBody
	err            error // a poison found while decoding
}

// Prepare implements Preparer: it decodes the message.
func (f *Sessions) Prepare(m *streams.Msg) any {
	var p prepared
	// <prefix>.sess.<token>.<ev|in|decide|snap|gone>
	rest, ok := strings.CutPrefix(m.Subject, f.prefix+".sess.")
	tok, kind, ok2 := strings.Cut(rest, ".")
	if ok && ok2 && kind == "snap" {
		// A snapshot of the log, written by nodes: nothing to fold.
		p.kind = kind
		return &p
	}
	if ok && ok2 && kind == "gone" {
		// The session was deleted: its subjects were purged after this.
		p.tok, p.kind = tok, kind
		return &p
	}
	if !ok || !ok2 || (kind != "ev" && kind != "in" && kind != "decide") {
		p.err = fmt.Errorf("%w: subject %s is not a session subject", ErrPoison, m.Subject)
		return &p
	}
	p.tok, p.kind = tok, kind
	if p.sid, p.err = streams.ParseToken(tok); p.err != nil {
		p.err = fmt.Errorf("%w: %v", ErrPoison, p.err)
		return &p
	}
	if kind == "in" || kind == "decide" {
		if f.checkInput != nil {
			if err := f.checkInput(m.Data, kind == "decide"); err != nil {
				p.err = fmt.Errorf("%w: input: %v", ErrPoison, err)
			}
		}
		return &p
	}
	e, err := sessionlog.DecodeEntry(m.Data)
	if err != nil {
		p.err = fmt.Errorf("%w: %v", ErrPoison, err)
		return &p
	}
	p.entry = e
	if e.Kind == sessionlog.KindCommit || e.Kind == sessionlog.KindConsume {
		p.data = e.Body
		if e.ByRef() {
			if f.body == nil {
				p.err = fmt.Errorf("%w: %s %s keeps its body by reference and this projection reads no object store", ErrPoison, e.Kind, e.Turn)
				return &p
			}
			if p.data, err = f.body(p.sid, e); err != nil {
				p.err = fmt.Errorf("%s %s: %w", e.Kind, e.Turn, err)
				if errors.Is(err, blobs.ErrMissing) || errors.Is(err, blobs.ErrCorrupt) || errors.Is(err, blobs.ErrTooLarge) {
					// Never readable: set aside. Anything else stops the
					// fold, which tries again.
					p.err = fmt.Errorf("%w: %v", ErrPoison, p.err)
				}
				return &p
			}
		}
	}
	if e.Kind == sessionlog.KindConsume {
		if p.consume, err = sessionlog.DecodeConsumeBody(p.data); err != nil {
			p.err = fmt.Errorf("%w: %v", ErrPoison, err)
		}
		return &p
	}
	if e.Kind == sessionlog.KindCommit {
		var body bodySummary
		if err := body.decode(p.data); err != nil {
			p.err = fmt.Errorf("%w: turn body: %v", ErrPoison, err)
			return &p
		}
		if st := body.Outcome.Status; st < turn.StatusRunning || st > turn.StatusDone {
			p.err = fmt.Errorf("%w: turn body with run status %d", ErrPoison, st)
			return &p
		}
		if _, err := streams.Token(e.Turn); err != nil {
			p.err = fmt.Errorf("%w: %v", ErrPoison, err)
			return &p
		}
		p.body = &body
	}
	return &p
}

// Apply implements Fold.
func (f *Sessions) Apply(tx *Txn, m *streams.Msg) error {
	return f.ApplyPrepared(tx, m, f.Prepare(m))
}

// ApplyPrepared implements Preparer.
func (f *Sessions) ApplyPrepared(tx *Txn, m *streams.Msg, prep any) error {
	p := prep.(*prepared)
	if p.err != nil {
		return p.err
	}
	if p.kind == "snap" {
		return nil
	}
	if p.kind == "gone" {
		return forget(tx, p.tok)
	}
	head, err := readHead(tx, p.tok)
	if errors.Is(err, ErrNotFound) {
		head = &SessionHead{Session: p.sid, Created: m.Time}
	} else if err != nil {
		return err
	}
	head.Active = m.Time
	switch p.kind {
	case "in", "decide":
		if err := tx.Set(key([]byte("i"), []byte(p.tok), u64(m.Seq)), []byte(m.MsgID())); err != nil {
			return err
		}
		head.Inputs++
		head.LastInput = m.Seq
		if m.Seq > head.InputCursor {
			head.Pending = append(head.Pending, m.Seq)
			head.PendingInputs = len(head.Pending)
		}
	case "ev":
		switch p.entry.Kind {
		case sessionlog.KindFence:
			head.Fence = p.entry.Token
			for _, seq := range p.entry.SetAside {
				if err := setAside(tx, &Poison{Seq: seq, Subject: f.prefix + ".sess." + p.tok + ".ev", Fold: SessionsFold,
					Reason: "passed over by the node that fenced at " + strconv.FormatUint(m.Seq, 10) + ": no lease could have written it (its fencing token is above every lease's, or it is not signed by the deployment)"}); err != nil {
					return err
				}
			}
		case sessionlog.KindCommit:
			if err := f.commit(tx, p.tok, head, m.Seq, p.entry, p.data, p.body); err != nil {
				return err
			}
		case sessionlog.KindConsume:
			head.consumed(p.consume.InputCursor)
			if err := f.inputs(tx, p.tok, p.consume.Inputs); err != nil {
				return err
			}
		}
		head.Revision = m.Seq
	}
	return writeHead(tx, p.tok, head)
}

// consumed moves the head's input cursor.
func (head *SessionHead) consumed(cursor uint64) {
	if cursor <= head.InputCursor {
		return
	}
	head.InputCursor = cursor
	i := 0
	for i < len(head.Pending) && head.Pending[i] <= head.InputCursor {
		i++
	}
	head.Pending = head.Pending[:copy(head.Pending, head.Pending[i:])]
	head.PendingInputs = len(head.Pending)
}

// inputs indexes the keys of consumed inputs and sets aside those the node
// refused, with its reason.
func (f *Sessions) inputs(tx *Txn, tok string, uses []sessionlog.InputUse) error {
	for _, u := range uses {
		switch {
		case u.Refused != "":
			subj := f.prefix + ".sess." + tok + ".in"
			if u.Decision {
				subj = f.prefix + ".sess." + tok + ".decide"
			}
			if err := setAside(tx, &Poison{Seq: u.Seq, Subject: subj, Fold: SessionsFold,
				Reason: "refused by the node that consumed it: " + u.Refused}); err != nil {
				return err
			}
		case u.Key != "" && u.Duplicate == 0:
			ktok, err := streams.Token(u.Key)
			if err != nil {
				continue // a node never takes a key that has no token
			}
			if err := tx.Set(key([]byte("k"), []byte(tok), []byte(ktok)), append(u64(u.Seq), u.Hash[:]...)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *Sessions) commit(tx *Txn, tok string, head *SessionHead, seq uint64, e *sessionlog.Entry, data []byte, body *bodySummary) error {
	turnTok, err := streams.Token(e.Turn) // checked by Prepare
	if err != nil {
		return err
	}
	// The log holds one commit per turn (sessionlog's commits are
	// idempotent by stamp), so the fold needs no lookup here.
	stampKey := key([]byte("t"), []byte(tok), []byte(turnTok))
	out := &body.Outcome
	info := TurnInfo{Turn: e.Turn, Ordinal: head.Turns + 1, Seq: seq, Hash: e.Hash, Token: e.Token,
		Status: out.Status, Termination: out.Termination, Usage: out.Usage, Iterations: out.Iterations,
		FirstMessage: head.Messages, Messages: out.Messages, Settings: e.Settings, ByRef: e.ByRef()}
	info.Body = data
	v, err := encodeTurnInfo(&info)
	if err != nil {
		return err
	}
	if err := tx.Set(stampKey, v); err != nil {
		return err
	}
	if err := tx.Set(key([]byte("o"), []byte(tok), u64(uint64(info.Ordinal))), []byte(e.Turn)); err != nil {
		return err
	}
	head.Turns++
	head.LastTurn = e.Turn
	head.Status, head.Termination = out.Status, out.Termination
	head.Usage = head.Usage.Add(out.Usage)
	head.Messages += out.Messages
	head.Suspended = out.Suspended
	head.Agent = body.Agent
	if len(head.Labels) == 0 {
		head.Labels = body.Labels
	}
	head.consumed(body.InputCursor)
	return f.inputs(tx, tok, body.Inputs)
}

// forget drops everything the fold holds of a deleted session.
func forget(tx *Txn, tok string) error {
	for _, family := range []string{"i", "k", "o", "t"} {
		if err := tx.DeletePrefix(key([]byte(family), []byte(tok), nil)); err != nil {
			return err
		}
	}
	tx.SetMemo(tok, nil) // Flush deletes its head and index entry
	return nil
}

// readHead reads a head through the run's memo: after its first read a
// head stays in memory, and Flush writes each changed head once a batch.
func readHead(tx *Txn, tok string) (*SessionHead, error) {
	if h, ok := tx.Memo(tok); ok {
		if h == nil {
			return nil, ErrNotFound // deleted
		}
		return h.(*SessionHead), nil
	}
	v, err := tx.Get(key([]byte("h"), []byte(tok)))
	if err != nil {
		return nil, err
	}
	var h SessionHead
	if err := msgpack.Unmarshal(v, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// writeHead keeps the head for Flush. The fold validates a message before
// it changes the head, so a poisoned message never leaves half an update.
func writeHead(tx *Txn, tok string, h *SessionHead) error {
	tx.SetMemo(tok, h)
	return nil
}

// Flush implements Flusher: it writes the heads changed in this Txn, and
// keeps the index of sessions holding suspended calls ("w/<session>"), so
// finding parked calls costs what those sessions do, not every session
// ever run.
func (f *Sessions) Flush(tx *Txn) error {
	return tx.Changed(func(tok string, h any) error {
		head, _ := h.(*SessionHead)
		if head == nil { // deleted
			if err := tx.Delete(key([]byte("h"), []byte(tok))); err != nil {
				return err
			}
			return tx.Delete(key([]byte("w"), []byte(tok)))
		}
		v, err := msgpack.Marshal(head)
		if err != nil {
			return err
		}
		if err := tx.Set(key([]byte("h"), []byte(tok)), v); err != nil {
			return err
		}
		if head.Suspended > 0 {
			return tx.Set(key([]byte("w"), []byte(tok)), nil)
		}
		return tx.Delete(key([]byte("w"), []byte(tok)))
	})
}

// Version implements Versioned: 2 added the index of sessions holding
// suspended calls, 3 the times heads carry (Created, Active).
func (f *Sessions) Version() int { return 3 }

// Reads of the session read model. They see what was folded when called;
// call WaitFor first to read a write of your own.

func (p *Projector) sessionsKey(parts ...[]byte) []byte {
	return foldKey(SessionsFold, key(parts...))
}

// Session returns a session's head, or ErrNotFound.
func (p *Projector) Session(id string) (*SessionHead, error) {
	tok, err := streams.Token(id)
	if err != nil {
		return nil, err
	}
	v, err := get(p.db, p.sessionsKey([]byte("h"), []byte(tok)))
	if err != nil {
		return nil, err
	}
	var h SessionHead
	return &h, msgpack.Unmarshal(v, &h)
}

// Sessions lists every session's head, ordered by subject token.
func (p *Projector) Sessions() ([]SessionHead, error) {
	var out []SessionHead
	err := scan(p.db, p.sessionsKey([]byte("h"), nil), func(_, v []byte) error {
		var h SessionHead
		if err := msgpack.Unmarshal(v, &h); err != nil {
			return err
		}
		out = append(out, h)
		return nil
	})
	return out, err
}

// SessionsPage returns at most limit session heads in the order of their
// keys, starting after the session after ("" for the first), and the
// session to pass as after for the next page ("" when there is none).
func (p *Projector) SessionsPage(after string, limit int) ([]SessionHead, string, error) {
	return p.SessionsWithPrefix("", after, limit)
}

// SessionsWithPrefix is SessionsPage over the sessions whose ids start
// with idPrefix, which must be made of [A-Za-z0-9_-] only (ids of those
// characters are their own subject tokens, so their keys share it).
func (p *Projector) SessionsWithPrefix(idPrefix, after string, limit int) ([]SessionHead, string, error) {
	if idPrefix != "" {
		if tok, err := streams.Token(idPrefix); err != nil || tok != idPrefix {
			return nil, "", fmt.Errorf("projector: session prefix %.64q: only [A-Za-z0-9_-]", idPrefix)
		}
	}
	prefix := p.sessionsKey([]byte("h"), nil)
	prefix = append(prefix[:len(prefix):len(prefix)], idPrefix...)
	lower := prefix
	if after != "" {
		tok, err := streams.Token(after)
		if err != nil {
			return nil, "", err
		}
		// The first key past after's own, within the prefix.
		if past := append(p.sessionsKey([]byte("h"), []byte(tok)), 0); bytes.Compare(past, lower) > 0 {
			lower = past
		}
	}
	upper := prefixEnd(prefix)
	if bytes.Compare(lower, upper) >= 0 {
		return nil, "", nil // after is past the prefix's sessions
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, "", err
	}
	defer it.Close()
	var out []SessionHead
	for it.First(); it.Valid(); it.Next() {
		if len(out) == limit {
			return out, out[len(out)-1].Session, nil
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, "", err
		}
		var h SessionHead
		if err := msgpack.Unmarshal(v, &h); err != nil {
			return nil, "", err
		}
		out = append(out, h)
	}
	return out, "", it.Error()
}

// SuspendedSessions returns the heads of the sessions that hold suspended
// calls.
func (p *Projector) SuspendedSessions() ([]SessionHead, error) {
	snap := p.db.NewSnapshot()
	defer snap.Close()
	var out []SessionHead
	prefix := p.sessionsKey([]byte("w"), nil)
	err := scan(snap, prefix, func(k, _ []byte) error {
		h, err := getDecoded[SessionHead](snap, p.sessionsKey([]byte("h"), k[len(prefix):]))
		if err != nil {
			return err
		}
		out = append(out, *h)
		return nil
	})
	return out, err
}

// Turn returns a committed turn by id, or ErrNotFound.
func (p *Projector) Turn(session, turnID string) (*TurnInfo, error) {
	tok, err := streams.Token(session)
	if err != nil {
		return nil, err
	}
	turnTok, err := streams.Token(turnID)
	if err != nil {
		return nil, err
	}
	v, err := get(p.db, p.sessionsKey([]byte("t"), []byte(tok), []byte(turnTok)))
	if err != nil {
		return nil, err
	}
	var t TurnInfo
	return &t, msgpack.Unmarshal(v, &t)
}

// Turns lists a session's committed turns in commit order.
func (p *Projector) Turns(session string) ([]TurnInfo, error) {
	tok, err := streams.Token(session)
	if err != nil {
		return nil, err
	}
	snap := p.db.NewSnapshot()
	defer snap.Close()
	var out []TurnInfo
	err = scan(snap, p.sessionsKey([]byte("o"), []byte(tok), nil), func(_, v []byte) error {
		turnTok, err := streams.Token(string(v))
		if err != nil {
			return err
		}
		t, err := getDecoded[TurnInfo](snap, p.sessionsKey([]byte("t"), []byte(tok), []byte(turnTok)))
		if err != nil {
			return err
		}
		out = append(out, *t)
		return nil
	})
	return out, err
}

// Transcript returns a session's messages from index from on.
func (p *Projector) Transcript(session string, from int) ([]TranscriptEntry, error) {
	turns, err := p.Turns(session)
	if err != nil {
		return nil, err
	}
	var out []TranscriptEntry
	for _, t := range turns {
		if t.FirstMessage+t.Messages <= from {
			continue
		}
		body, err := sessionlog.DecodeTurnBody(t.Body)
		if err != nil {
			return nil, err
		}
		for i, msg := range body.Outcome.Messages {
			if t.FirstMessage+i >= from {
				out = append(out, TranscriptEntry{Index: t.FirstMessage + i, Turn: t.Turn, Message: msg})
			}
		}
	}
	return out, nil
}

// InputKey is the first input that used a key.
type InputKey struct {
	Seq  uint64
	Hash [32]byte
}

// InputKey returns the input of session that first used key, as far as the
// projection has folded.
func (p *Projector) InputKey(session, idemKey string) (InputKey, bool, error) {
	tok, err := streams.Token(session)
	if err != nil {
		return InputKey{}, false, err
	}
	ktok, err := streams.Token(idemKey)
	if err != nil {
		return InputKey{}, false, err
	}
	v, err := get(p.db, p.sessionsKey([]byte("k"), []byte(tok), []byte(ktok)))
	if errors.Is(err, ErrNotFound) {
		return InputKey{}, false, nil
	}
	if err != nil || len(v) != 40 {
		return InputKey{}, false, fmt.Errorf("projector: input key of %s: %d bytes, %v", session, len(v), err)
	}
	k := InputKey{Seq: binary.BigEndian.Uint64(v)}
	copy(k.Hash[:], v[8:])
	return k, true, nil
}

// Suspended returns the calls the session holds suspended, as its last
// commit left them.
func (p *Projector) Suspended(h *SessionHead) ([]turn.SuspendedCall, error) {
	if h.Suspended == 0 || h.LastTurn == "" {
		return nil, nil
	}
	info, err := p.Turn(h.Session, h.LastTurn)
	if err != nil {
		return nil, fmt.Errorf("session %s: last turn %s: %w", h.Session, h.LastTurn, err)
	}
	body, err := sessionlog.DecodeTurnBody(info.Body)
	if err != nil {
		return nil, fmt.Errorf("session %s: last turn %s: %w", h.Session, h.LastTurn, err)
	}
	return body.Outcome.Suspended, nil
}
