package sessionlog

import (
	"context"
	"fmt"
	"strings"

	"github.com/lash-run/lash/streams"
)

// Input is one message on a session's input subject.
type Input struct {
	Seq   uint64
	MsgID string
	Data  []byte
}

// AppendInput appends input for a session. msgID is the client's
// idempotency key, scoped to the session: a retry within the dedupe window
// returns the original revision with duplicate set. Anyone may append; no
// lease is needed. (Programs that publish to the input subject themselves
// must make their Nats-Msg-Id unique across sessions.)
func (l *Log) AppendInput(ctx context.Context, session, msgID string, data []byte) (seq uint64, duplicate bool, err error) {
	if msgID == "" {
		return 0, false, fmt.Errorf("%w: an input needs an idempotency key", ErrInvalid)
	}
	subj, err := l.s.Subjects().SessionInputs(session)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return l.s.Publish(ctx, streams.Publication{Subject: subj, Data: data, MsgID: scopedInput(subj, msgID)})
}

// scopedInput makes a client's key unique to the session: JetStream dedupes
// msg ids across the whole stream, and two sessions may use the same key.
func scopedInput(subject, key string) string { return msgID(subject, "in", key) }

// InputsAfter calls fn for each input with revision above cursor, in order,
// up to the last input stored when it started.
func (l *Log) InputsAfter(ctx context.Context, session string, cursor uint64, fn func(Input) error) error {
	subj, err := l.s.Subjects().SessionInputs(session)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return l.s.Read(ctx, subj, cursor+1, func(m *streams.Msg) error {
		return fn(Input{Seq: m.Seq, MsgID: strings.TrimPrefix(m.MsgID(), scopedInput(subj, "")), Data: m.Data})
	})
}

// InputAfter returns the first input with revision above cursor, or
// streams.ErrNotFound: one read, answered by the stream's leader.
func (l *Log) InputAfter(ctx context.Context, session string, cursor uint64) (Input, error) {
	subj, err := l.s.Subjects().SessionInputs(session)
	if err != nil {
		return Input{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	m, err := l.s.NextOnSubject(ctx, subj, cursor+1)
	if err != nil {
		return Input{}, err
	}
	return Input{Seq: m.Seq, MsgID: strings.TrimPrefix(m.MsgID(), scopedInput(subj, "")), Data: m.Data}, nil
}

// InputAt returns the input at revision seq of the session's inputs, or
// streams.ErrNotFound.
func (l *Log) InputAt(ctx context.Context, session string, seq uint64) (Input, error) {
	subj, err := l.s.Subjects().SessionInputs(session)
	if err != nil {
		return Input{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	m, err := l.s.NextOnSubject(ctx, subj, seq)
	if err != nil {
		return Input{}, err
	}
	if m.Seq != seq {
		return Input{}, fmt.Errorf("%w: no input at %d in session %s", streams.ErrNotFound, seq, session)
	}
	return Input{Seq: m.Seq, MsgID: strings.TrimPrefix(m.MsgID(), scopedInput(subj, "")), Data: m.Data}, nil
}
