package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pubOpts are the checks and settings of a publish, as headers.
type pubOpts struct {
	msgID  string
	expect *uint64 // the subject's last sequence
	ttl    time.Duration
	// op names the call for an Interceptor when it is not "append" (an
	// expected sequence) or "publish".
	op string
}

// publish sends m with opts and reads its ack, as jetstream's PublishMsg
// does, without its option closures and with the usual ack read by hand
// (parseAck): every write of a turn comes through here.
func (c *Client) publish(ctx context.Context, m *nats.Msg, o pubOpts) (*jetstream.PubAck, error) {
	if o.msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, o.msgID)
	}
	if o.expect != nil {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(*o.expect, 10))
	}
	if o.ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, o.ttl.String())
	}
	if c.cfg.Intercept != nil {
		op := o.op
		switch {
		case op != "":
		case o.expect != nil:
			op = "append"
		default:
			op = "publish"
		}
		return intercepted(c, ctx, Call{Op: op, Subject: m.Subject}, func(ctx context.Context) (*jetstream.PubAck, error) {
			return c.request(ctx, m)
		})
	}
	return c.request(ctx, m)
}

// request is one round trip of publish.
func (c *Client) request(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	resp, err := c.nc.RequestMsgWithContext(ctx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		// No stream answered (a leader being elected): jetstream's publish
		// tries again a few times, a moment apart.
		return c.js.PublishMsg(ctx, m)
	}
	if err != nil {
		return nil, err
	}
	return parseAck(resp.Data)
}

// parseAck reads a publish's ack. The usual one, {"stream":S,"seq":N}
// with "duplicate": true perhaps, is read by hand; anything else (an
// error, a domain) through encoding/json, with jetstream's errors.
func parseAck(data []byte) (*jetstream.PubAck, error) {
	if ack, ok := plainAck(string(data)); ok {
		return ack, nil
	}
	var resp struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("nats: %w", resp.Error)
	}
	if resp.PubAck == nil || resp.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return resp.PubAck, nil
}

func plainAck(s string) (*jetstream.PubAck, bool) {
	s, ok := strings.CutPrefix(s, `{"stream":"`)
	if !ok {
		return nil, false
	}
	end := strings.IndexByte(s, '"')
	if end <= 0 {
		return nil, false
	}
	stream := s[:end]
	for i := range len(stream) {
		if c := stream[i]; c < 0x20 || c > 0x7e || c == '\\' {
			return nil, false // json would unescape or replace it
		}
	}
	s, ok = strings.CutPrefix(s[end:], `","seq":`)
	if !ok {
		return nil, false
	}
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	if digits > 1 && s[0] == '0' {
		return nil, false // JSON has no leading zeros
	}
	seq, err := strconv.ParseUint(s[:digits], 10, 64)
	if err != nil {
		return nil, false
	}
	switch s[digits:] {
	case "}":
		return &jetstream.PubAck{Stream: stream, Sequence: seq}, true
	case `,"duplicate": true}`, `,"duplicate":true}`: // the server writes the first
		return &jetstream.PubAck{Stream: stream, Sequence: seq, Duplicate: true}, true
	}
	return nil, false
}
