package sessionlog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lash-run/lash/streams"
)

// Input is one message on a session's input or decision subject.
type Input struct {
	Seq   uint64
	MsgID string
	Data  []byte
	// Subject and Header are the message's, for checking a signature.
	Subject string
	Header  nats.Header
	// Decision: the input came on the decision subject.
	Decision bool
	// Time is when the stream stored it.
	Time time.Time
}

// AppendInput appends a client's message for a session. msgID is the
// client's idempotency key, scoped to the session: a retry within the
// dedupe window returns the original revision with duplicate set. No lease
// is needed. (Programs that publish to the input subject themselves must
// make their Nats-Msg-Id unique across sessions.)
func (l *Log) AppendInput(ctx context.Context, session, msgID string, data []byte) (seq uint64, duplicate bool, err error) {
	return l.appendInput(ctx, session, msgID, data, false)
}

// AppendDecision is AppendInput on the session's decision subject, where
// decisions on suspended calls and cancels go.
func (l *Log) AppendDecision(ctx context.Context, session, msgID string, data []byte) (seq uint64, duplicate bool, err error) {
	return l.appendInput(ctx, session, msgID, data, true)
}

// AppendVouched is AppendInput of an input whose message vouch signs
// (streams.Client.Vouch): a node's notice.
func (l *Log) AppendVouched(ctx context.Context, session, msgID string, data []byte, vouch func(*streams.Publication)) (uint64, bool, error) {
	return l.appendInputWith(ctx, session, msgID, data, false, vouch)
}

func (l *Log) appendInput(ctx context.Context, session, msgID string, data []byte, decision bool) (uint64, bool, error) {
	return l.appendInputWith(ctx, session, msgID, data, decision, nil)
}

func (l *Log) appendInputWith(ctx context.Context, session, msgID string, data []byte, decision bool, vouch func(*streams.Publication)) (uint64, bool, error) {
	if msgID == "" {
		return 0, false, fmt.Errorf("%w: an input needs an idempotency key", ErrInvalid)
	}
	channels, err := l.s.Subjects().SessionInputChannels(session)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	subj := channels[0]
	if decision {
		subj = channels[1]
	}
	p := streams.Publication{Subject: subj, Data: data, MsgID: scopedInput(subj, msgID)}
	if vouch != nil {
		vouch(&p)
	}
	return l.s.Publish(ctx, p)
}

// scopedInput makes a client's key unique to the session: JetStream dedupes
// msg ids across the whole stream, and two sessions may use the same key.
func scopedInput(subject, key string) string { return msgID(subject, "in", key) }

func input(m *streams.Msg) Input {
	return Input{Seq: m.Seq, MsgID: strings.TrimPrefix(m.MsgID(), scopedInput(m.Subject, "")), Data: m.Data,
		Decision: strings.HasSuffix(m.Subject, ".decide"), Time: m.Time, Subject: m.Subject, Header: m.Header}
}

// InputsAfter calls fn for each input with revision above cursor, in order,
// up to the last input stored when it started.
func (l *Log) InputsAfter(ctx context.Context, session string, cursor uint64, fn func(Input) error) error {
	channels, err := l.s.Subjects().SessionInputChannels(session)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return l.s.ReadSubjects(ctx, channels, cursor+1, func(m *streams.Msg) error { return fn(input(m)) })
}

// InputAfter returns the first input with revision above cursor, or
// streams.ErrNotFound: one read per input subject, at once, answered by the
// stream's leader.
func (l *Log) InputAfter(ctx context.Context, session string, cursor uint64) (Input, error) {
	channels, err := l.s.Subjects().SessionInputChannels(session)
	if err != nil {
		return Input{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	m, err := l.s.NextOnSubjects(ctx, channels, cursor+1)
	if err != nil {
		return Input{}, err
	}
	return input(m), nil
}

// InputAt returns the input at revision seq of the session's inputs, or
// streams.ErrNotFound.
func (l *Log) InputAt(ctx context.Context, session string, seq uint64) (Input, error) {
	in, err := l.InputAfter(ctx, session, seq-1)
	if err != nil {
		return Input{}, err
	}
	if in.Seq != seq {
		return Input{}, fmt.Errorf("%w: no input at %d in session %s", streams.ErrNotFound, seq, session)
	}
	return in, nil
}
