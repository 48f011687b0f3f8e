package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directGet asks a stream that allows direct gets (SESSIONS on one server,
// ADR 0033) for the first message on subject at or after seq, or for the
// last one when last is set. The request and the answer are read and
// written here: a direct get is hot (every checkpoint makes two), and the
// library's general path encodes the request as JSON by reflection.
//
// When nobody answers, the stream may be starting (the read is tried
// again) or an operator turned its direct gets off since this client bound
// it: the stream's info, read again, says which, and in the second case
// directGet returns errDirectOff and every later read goes through the API.
func (c *Client) directGet(ctx context.Context, st jetstream.Stream, stream, subject string, seq uint64, last bool) (*Msg, error) {
	if !plainSubject(subject) {
		return nil, fmt.Errorf("streams: read %s: not a subject lash makes", subject)
	}
	var body []byte
	if last {
		body = append(append(append(body, `{"last_by_subj":"`...), subject...), `"}`...)
	} else {
		body = append(append(body, `{"seq":`...), strconv.FormatUint(max(seq, 1), 10)...)
		body = append(append(append(body, `,"next_by_subj":"`...), subject...), `"}`...)
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var reply *nats.Msg
	err := retryRead(ctx, func() (err error) {
		if c.cfg.Intercept != nil {
			reply, err = intercepted(c, ctx, Call{Op: "direct.get", Subject: subject}, func(ctx context.Context) (*nats.Msg, error) {
				return c.directAsk(ctx, st, stream, body)
			})
			return err
		}
		reply, err = c.directAsk(ctx, st, stream, body)
		return err
	})
	if errors.Is(err, errDirectOff) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("streams: read %s: %w", subject, err)
	}
	return directAnswer(reply, subject)
}

// directAsk is one round trip of directGet.
func (c *Client) directAsk(ctx context.Context, st jetstream.Stream, stream string, body []byte) (*nats.Msg, error) {
	reply, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, body)
	if errors.Is(err, nats.ErrNoResponders) {
		if info, ierr := st.Info(ctx); ierr == nil && !info.Config.AllowDirect {
			return nil, errDirectOff
		}
	}
	return reply, err
}

// directAnswer reads a direct get's reply: the message with its place in
// headers, or a status without a body.
func directAnswer(r *nats.Msg, subject string) (*Msg, error) {
	if len(r.Data) == 0 {
		switch status := r.Header.Get("Status"); status {
		case "":
		case "404":
			return nil, fmt.Errorf("%w: no message on %s", ErrNotFound, subject)
		default:
			return nil, fmt.Errorf("streams: read %s: status %s %s", subject, status, r.Header.Get("Description"))
		}
	}
	seq, err := strconv.ParseUint(r.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("streams: read %s: %w: the answer has no sequence", subject, errBadAnswer)
	}
	at, err := time.Parse(time.RFC3339Nano, r.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("streams: read %s: %w: the answer has no time", subject, errBadAnswer)
	}
	subj := r.Header.Get(jetstream.SubjectHeader)
	if subj == "" {
		return nil, fmt.Errorf("streams: read %s: %w: the answer has no subject", subject, errBadAnswer)
	}
	return &Msg{Subject: subj, Seq: seq, Header: r.Header, Data: r.Data, Time: at}, nil
}

var (
	errBadAnswer = errors.New("unreadable direct get answer")
	errDirectOff = errors.New("the stream's direct gets are off")
)

// plainSubject: subject needs no escaping inside a JSON string. Subjects
// lash makes hold tokens of letters, digits, '_', '-', '=' and wildcards.
func plainSubject(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '"' || r == '\\' })
}

// direct says whether st answers direct gets, and its name.
func direct(st jetstream.Stream) (string, bool) {
	info := st.CachedInfo()
	if info == nil || !info.Config.AllowDirect {
		return "", false
	}
	return info.Config.Name, true
}

// Bounds of one batched direct get: the subscription that takes the
// answer holds at most a batch, so it never overflows.
const (
	batchMsgs  = 256
	batchBytes = 8 << 20
)

// directRead is Read of one subject on a stream that answers direct gets:
// batched direct gets, each one round trip for up to batchMsgs messages,
// instead of a look, a head and a consumer. The leader answers (ADR 0033),
// so the read sees every message stored before the call.
// On errDirectOff, next is where a read through a consumer goes on.
func (c *Client) directRead(ctx context.Context, st jetstream.Stream, stream, subject string, from uint64, fn func(*Msg) error) (next uint64, err error) {
	if !plainSubject(subject) {
		return 0, fmt.Errorf("streams: read %s: not a subject lash makes", subject)
	}
	for seq := max(from, 1); ; {
		var more bool
		err := retryRead(ctx, func() (err error) {
			var last uint64
			last, more, err = c.directBatch(ctx, st, stream, subject, seq, fn)
			if last != 0 {
				seq = last + 1 // what fn took is not read again on a retry
			}
			return err
		})
		var fe *fnError
		switch {
		case errors.As(err, &fe):
			return 0, fe.err
		case errors.Is(err, ErrNotFound):
			return 0, nil
		case errors.Is(err, errDirectOff):
			return seq, err
		case err != nil || !more:
			return 0, err
		}
	}
}

// directBatch makes one batched direct get from seq on and hands fn each
// message; it returns the last sequence handed over and whether more
// follow.
func (c *Client) directBatch(ctx context.Context, st jetstream.Stream, stream, subject string, seq uint64, fn func(*Msg) error) (last uint64, more bool, err error) {
	if c.cfg.Intercept != nil {
		return c.directBatchIntercepted(ctx, st, stream, subject, seq, fn)
	}
	return c.directBatchOnce(ctx, st, stream, subject, seq, fn)
}

// directBatchIntercepted is directBatch through the interceptor. The
// messages of a call are handed to fn once it returned, so a call made
// again or whose answer is lost hands nothing twice (fn must not reach the
// interceptor: as a closure it would escape on every read).
func (c *Client) directBatchIntercepted(ctx context.Context, st jetstream.Stream, stream, subject string, seq uint64, fn func(*Msg) error) (last uint64, more bool, err error) {
	a, err := intercepted(c, ctx, Call{Op: "direct.read", Subject: subject}, func(ctx context.Context) (batchAnswer, error) {
		var a batchAnswer
		_, more, err := c.directBatchOnce(ctx, st, stream, subject, seq, func(m *Msg) error {
			a.msgs = append(a.msgs, m)
			return nil
		})
		a.more = more
		return a, err
	})
	for _, m := range a.msgs {
		last = m.Seq
		if err := fn(m); err != nil {
			return last, false, &fnError{err}
		}
	}
	return last, a.more, err
}

// batchAnswer is what one batched direct get brought.
type batchAnswer struct {
	msgs []*Msg
	more bool
}

func (c *Client) directBatchOnce(ctx context.Context, st jetstream.Stream, stream, subject string, seq uint64, fn func(*Msg) error) (last uint64, more bool, err error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	inbox, answers, done, err := c.replies.open(c.nc)
	if err != nil {
		return 0, false, err
	}
	defer done()
	body := fmt.Appendf(nil, `{"seq":%d,"next_by_subj":"%s","batch":%d,"max_bytes":%d}`, seq, subject, batchMsgs, batchBytes)
	if err := c.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, body); err != nil {
		return 0, false, err
	}
	for {
		var r *nats.Msg
		select {
		case r = <-answers:
		case <-ctx.Done():
			return last, false, fmt.Errorf("streams: read %s: %w", subject, ctx.Err())
		}
		if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
			// Nobody answers: the stream is starting, or its direct gets
			// were turned off.
			if info, ierr := st.Info(ctx); ierr == nil && !info.Config.AllowDirect {
				return 0, false, errDirectOff
			}
			return 0, false, nats.ErrNoResponders
		}
		if len(r.Data) == 0 && r.Header.Get("Status") == "204" {
			pending, err := strconv.ParseUint(r.Header.Get("Nats-Num-Pending"), 10, 64)
			if err != nil {
				return last, false, fmt.Errorf("streams: read %s: %w: the end of a batch without a count", subject, errBadAnswer)
			}
			return last, pending > 0, nil
		}
		m, err := directAnswer(r, subject)
		if err != nil {
			return last, false, err
		}
		last = m.Seq
		if err := fn(m); err != nil {
			return last, false, &fnError{err}
		}
	}
}

// fnError carries the caller's error through retryRead untouched.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }
func (e *fnError) Unwrap() error { return e.err }

// replyMux takes the answers of batched direct gets on one subscription
// for the client's life: a subscription per read costs the server far more
// than the read (half a millisecond against tens of microseconds, measured).
type replyMux struct {
	mu      sync.Mutex
	prefix  string // "<inbox>." once subscribed
	next    uint64
	waiting map[string]chan *nats.Msg
}

// open returns a reply subject, the channel its answers come on (room for
// a whole batch and its end, so the subscription never waits on a reader)
// and what to call when done with it.
func (x *replyMux) open(nc *nats.Conn) (string, <-chan *nats.Msg, func(), error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.prefix == "" {
		inbox := nc.NewInbox()
		sub, err := nc.Subscribe(inbox+".*", x.deliver)
		if err != nil {
			return "", nil, nil, fmt.Errorf("streams: subscribe for direct gets: %w", err)
		}
		// Every answer is for a read that waits for it; what a reader left
		// behind is dropped in deliver, never held here.
		_ = sub.SetPendingLimits(-1, -1)
		x.prefix, x.waiting = inbox+".", map[string]chan *nats.Msg{}
	}
	x.next++
	token := strconv.FormatUint(x.next, 36)
	ch := make(chan *nats.Msg, batchMsgs+2)
	x.waiting[token] = ch
	return x.prefix + token, ch, func() {
		x.mu.Lock()
		delete(x.waiting, token)
		x.mu.Unlock()
	}, nil
}

func (x *replyMux) deliver(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	x.mu.Lock()
	ch := x.waiting[token]
	x.mu.Unlock()
	if ch == nil {
		return // its read ended
	}
	select {
	case ch <- m:
	default: // more than a batch: the read fails on its deadline rather than block the others
	}
}
