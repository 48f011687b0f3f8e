package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
		reply, err = c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, body)
		if errors.Is(err, nats.ErrNoResponders) {
			if info, ierr := st.Info(ctx); ierr == nil && !info.Config.AllowDirect {
				return errDirectOff
			}
		}
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
