package projector

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

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
type Sessions struct{ prefix string }

// NewSessions folds the session subjects of the deployment with prefix.
func NewSessions(prefix string) *Sessions { return &Sessions{prefix: prefix} }

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

// Apply implements Fold.
func (f *Sessions) Apply(tx *Txn, m *streams.Msg) error {
	// <prefix>.sess.<token>.<ev|in>
	rest, ok := strings.CutPrefix(m.Subject, f.prefix+".sess.")
	tok, kind, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return fmt.Errorf("%w: subject %s is not a session subject", ErrPoison, m.Subject)
	}
	sid, err := streams.ParseToken(tok)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPoison, err)
	}
	head, err := readHead(tx, tok)
	if errors.Is(err, ErrNotFound) {
		head = &SessionHead{Session: sid}
	} else if err != nil {
		return err
	}
	switch kind {
	case "in":
		if err := tx.Set(key([]byte("i"), []byte(tok), u64(m.Seq)), []byte(m.MsgID())); err != nil {
			return err
		}
		head.Inputs++
		head.LastInput = m.Seq
		if m.Seq > head.InputCursor {
			head.Pending = append(head.Pending, m.Seq)
			head.PendingInputs = len(head.Pending)
		}
	case "ev":
		e, err := sessionlog.DecodeEntry(m.Data)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPoison, err)
		}
		switch e.Kind {
		case sessionlog.KindFence:
			head.Fence = e.Token
		case sessionlog.KindCommit:
			var body bodySummary
			if err := msgpack.Unmarshal(e.Body, &body); err != nil {
				return fmt.Errorf("%w: turn body: %v", ErrPoison, err)
			}
			if st := body.Outcome.Status; st < turn.StatusRunning || st > turn.StatusDone {
				return fmt.Errorf("%w: turn body with run status %d", ErrPoison, st)
			}
			if err := f.commit(tx, tok, head, m.Seq, e, &body); err != nil {
				return err
			}
		}
		head.Revision = m.Seq
	default:
		return fmt.Errorf("%w: subject %s is not a session subject", ErrPoison, m.Subject)
	}
	return writeHead(tx, tok, head)
}

// bodySummary reads what the head and the turn list need from a commit's
// body, skipping over the messages themselves: the transcript keeps the
// body's bytes as they are.
type bodySummary struct {
	Outcome struct {
		Status      turn.RunStatus
		Termination turn.Termination
		Messages    arrayLen
		Suspended   arrayLen
		Usage       turn.Usage
		Iterations  int
	} `msgpack:"o"`
	InputCursor uint64 `msgpack:"c"`
}

// arrayLen decodes a msgpack array as its length.
type arrayLen int

func (n *arrayLen) DecodeMsgpack(d *msgpack.Decoder) error {
	l, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	for range max(l, 0) {
		if err := d.Skip(); err != nil {
			return err
		}
	}
	*n = arrayLen(max(l, 0))
	return nil
}

func (f *Sessions) commit(tx *Txn, tok string, head *SessionHead, seq uint64, e *sessionlog.Entry, body *bodySummary) error {
	turnTok, err := streams.Token(e.Turn)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPoison, err)
	}
	// The log holds one commit per turn (sessionlog's commits are
	// idempotent by stamp), so the fold needs no lookup here.
	stampKey := key([]byte("t"), []byte(tok), []byte(turnTok))
	out := &body.Outcome
	info := TurnInfo{Turn: e.Turn, Ordinal: head.Turns + 1, Seq: seq, Hash: e.Hash, Token: e.Token,
		Status: out.Status, Termination: out.Termination, Usage: out.Usage, Iterations: out.Iterations,
		FirstMessage: head.Messages, Messages: int(out.Messages)}
	info.Body = e.Body
	v, err := msgpack.Marshal(&info)
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
	head.Messages += int(out.Messages)
	head.Suspended = int(out.Suspended)
	if body.InputCursor > head.InputCursor {
		head.InputCursor = body.InputCursor
		i := 0
		for i < len(head.Pending) && head.Pending[i] <= head.InputCursor {
			i++
		}
		head.Pending = append([]uint64(nil), head.Pending[i:]...)
		head.PendingInputs = len(head.Pending)
	}
	return nil
}

// readHead reads a head through the run's memo: after its first read a
// head stays in memory, and Flush writes each changed head once a batch.
func readHead(tx *Txn, tok string) (*SessionHead, error) {
	if h, ok := tx.Memo(tok); ok {
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

// Flush implements Flusher: it writes the heads changed in this Txn.
func (f *Sessions) Flush(tx *Txn) error {
	return tx.Changed(func(tok string, h any) error {
		v, err := msgpack.Marshal(h.(*SessionHead))
		if err != nil {
			return err
		}
		return tx.Set(key([]byte("h"), []byte(tok)), v)
	})
}

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
		tv, err := get(snap, p.sessionsKey([]byte("t"), []byte(tok), []byte(turnTok)))
		if err != nil {
			return err
		}
		var t TurnInfo
		if err := msgpack.Unmarshal(tv, &t); err != nil {
			return err
		}
		out = append(out, t)
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
