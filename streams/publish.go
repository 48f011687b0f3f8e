package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of the write and read primitives.
var (
	// ErrConflict: a compare-and-set found another head than expected. The
	// *ConflictError carries the subject and the expected sequence.
	ErrConflict = errors.New("streams: conflict")
	// ErrNotFound: no message matched.
	ErrNotFound = errors.New("streams: not found")
	// ErrTooLarge: the payload exceeds the stream's maximum message size.
	ErrTooLarge = errors.New("streams: message too large")
)

// Server error codes that mean "the subject's last sequence is not the
// expected one": 10071 on a single server, 10164 on a replicated stream
// while another write to the subject is in flight.
const (
	codeWrongLastSequence      jetstream.ErrorCode = 10071
	codeWrongLastSequenceConst jetstream.ErrorCode = 10164
	codeMessageTooLarge        jetstream.ErrorCode = 10054
	// The server cannot decide yet: a publish with the same msg id, or an
	// expected-sequence check on the subject, is still in flight.
	codeDuplicateInFlight jetstream.ErrorCode = 10158
	codeExpectNotReady    jetstream.ErrorCode = 10163
)

// inFlightRetries bounds how often a publish is repeated while the server
// reports a write in flight; after that a 10164 is taken as a conflict.
const inFlightRetries = 8

// pause waits before retry attempt n (0-based): 2ms doubling to 64ms.
func pause(ctx context.Context, n int) error {
	t := time.NewTimer(time.Duration(2<<min(n, 5)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// transientRead reports read errors worth repeating: right after a stream
// or consumer is created or a leader changes, a server may not know the
// responder yet.
func transientRead(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// retryRead runs read until it succeeds, fails for good, or ctx ends.
func retryRead(ctx context.Context, read func() error) error {
	for n := 0; ; n++ {
		err := read()
		if err == nil || !transientRead(err) || n >= 10 {
			return err
		}
		if perr := pause(ctx, n); perr != nil {
			return err
		}
	}
}

// ConflictError is a compare-and-set that lost.
type ConflictError struct {
	Subject  string
	Expected uint64
	Code     jetstream.ErrorCode
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("streams: conflict on %s: its last sequence is not %d (server code %d)", e.Subject, e.Expected, e.Code)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// Msg is a stored message.
type Msg struct {
	Subject string
	Seq     uint64
	Header  nats.Header
	Data    []byte
	Time    time.Time
}

// MsgID is the message's Nats-Msg-Id header.
func (m *Msg) MsgID() string { return m.Header.Get(jetstream.MsgIDHeader) }

// Publication is one message to append.
type Publication struct {
	Subject string
	Data    []byte
	Header  nats.Header
	// MsgID dedupes retries within the duplicate window and, after a
	// conflict, tells "my write already landed" from a real conflict.
	MsgID string
}

// Append publishes p if the last message on p.Subject has stream sequence
// expect (0: the subject must be empty). It returns the new message's
// sequence. A lost compare-and-set returns a *ConflictError, unless the
// message on the subject right after expect carries p.MsgID: then this write
// landed earlier (a retry after a lost ack) and Append returns its sequence
// with duplicate set, as it does when the server dedupes the retry.
func (c *Client) Append(ctx context.Context, p Publication, expect uint64) (seq uint64, duplicate bool, err error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	m, err := c.msg(p)
	if err != nil {
		return 0, false, err
	}
	var ack *jetstream.PubAck
	for n := 0; ; n++ {
		ack, err = c.publish(ctx, m, pubOpts{msgID: p.MsgID, expect: &expect})
		code := apiCode(err)
		inFlight := code == codeDuplicateInFlight || code == codeExpectNotReady ||
			code == codeWrongLastSequenceConst && p.MsgID != ""
		if !inFlight || n >= inFlightRetries {
			break
		}
		// Repeat the same publish: it resolves to a dedupe, a landing, or
		// a settled conflict once the write in flight is decided.
		if perr := pause(ctx, n); perr != nil {
			break
		}
	}
	if err == nil {
		return ack.Sequence, ack.Duplicate, nil
	}
	code := apiCode(err)
	switch {
	case code == codeWrongLastSequence || code == codeWrongLastSequenceConst:
	case tooLarge(err):
		return 0, false, fmt.Errorf("%w: %d bytes on %s", ErrTooLarge, len(p.Data), p.Subject)
	default:
		return 0, false, fmt.Errorf("streams: append to %s: %w", p.Subject, err)
	}
	conflict := &ConflictError{Subject: p.Subject, Expected: expect, Code: code}
	if p.MsgID == "" {
		return 0, false, conflict
	}
	next, err := c.NextOnSubject(ctx, p.Subject, expect+1)
	switch {
	case errors.Is(err, ErrNotFound):
		// The head moved but nothing follows expect: the head went back
		// (purge) or a write is still settling; either way it was not ours.
		return 0, false, conflict
	case err != nil:
		return 0, false, fmt.Errorf("streams: append to %s: reading after a conflict: %w", p.Subject, err)
	case next.MsgID() == p.MsgID:
		return next.Seq, true, nil
	}
	return 0, false, conflict
}

// Publish appends p without a compare-and-set: for subjects anyone may
// append to, such as session inputs. A retry with the same MsgID within the
// duplicate window returns the original sequence.
func (c *Client) Publish(ctx context.Context, p Publication) (seq uint64, duplicate bool, err error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	m, err := c.msg(p)
	if err != nil {
		return 0, false, err
	}
	ack, err := c.publish(ctx, m, pubOpts{msgID: p.MsgID})
	if err != nil {
		if tooLarge(err) {
			return 0, false, fmt.Errorf("%w: %d bytes on %s", ErrTooLarge, len(p.Data), p.Subject)
		}
		return 0, false, fmt.Errorf("streams: publish to %s: %w", p.Subject, err)
	}
	return ack.Sequence, ack.Duplicate, nil
}

func tooLarge(err error) bool {
	return apiCode(err) == codeMessageTooLarge || errors.Is(err, nats.ErrMaxPayload)
}

func (c *Client) msg(p Publication) (*nats.Msg, error) {
	// Room for publish's own headers too (msg id, expected sequence,
	// TTL): a map that grows costs every record.
	m := &nats.Msg{Subject: p.Subject, Data: p.Data, Header: make(nats.Header, len(p.Header)+3)}
	for k, v := range p.Header {
		m.Header[k] = v
	}
	return m, c.sign(m)
}

// Head returns the last message on subject, or ErrNotFound.
func (c *Client) Head(ctx context.Context, subject string) (*Msg, error) {
	st, err := c.streamOf(subject)
	if err != nil {
		return nil, err
	}
	if name, ok := direct(st); ok {
		if m, err := c.directGet(ctx, st, name, subject, 0, true); !errors.Is(err, errDirectOff) {
			return m, err
		}
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var raw *jetstream.RawStreamMsg
	err = retryRead(ctx, func() (err error) {
		if c.cfg.Intercept != nil {
			raw, err = intercepted(c, ctx, Call{Op: "get", Subject: subject}, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
				return st.GetLastMsgForSubject(ctx, subject)
			})
			return err
		}
		raw, err = st.GetLastMsgForSubject(ctx, subject)
		return err
	})
	return fromRaw(raw, err, subject)
}

// NextOnSubject returns the first message on subject (which may hold
// wildcards) with sequence at least seq, or ErrNotFound.
func (c *Client) NextOnSubject(ctx context.Context, subject string, seq uint64) (*Msg, error) {
	st, err := c.streamOf(subject)
	if err != nil {
		return nil, err
	}
	if name, ok := direct(st); ok {
		if m, err := c.directGet(ctx, st, name, subject, seq, false); !errors.Is(err, errDirectOff) {
			return m, err
		}
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var raw *jetstream.RawStreamMsg
	err = retryRead(ctx, func() (err error) {
		if c.cfg.Intercept != nil {
			raw, err = intercepted(c, ctx, Call{Op: "get", Subject: subject}, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
				return st.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject(subject))
			})
			return err
		}
		raw, err = st.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject(subject))
		return err
	})
	return fromRaw(raw, err, subject)
}

func fromRaw(raw *jetstream.RawStreamMsg, err error, subject string) (*Msg, error) {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: no message on %s", ErrNotFound, subject)
	}
	if err != nil {
		return nil, fmt.Errorf("streams: read %s: %w", subject, err)
	}
	return &Msg{Subject: raw.Subject, Seq: raw.Sequence, Header: raw.Header, Data: raw.Data, Time: raw.Time}, nil
}
