package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// Atomic batch headers. The server stores the batch all or nothing; readers
// never see part of one.
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
	// MaxBatch is the server's limit of messages in one atomic batch.
	MaxBatch = 1000
)

// ErrBatch: the server refused an atomic batch for a reason other than a
// conflict (too large, disabled, timed out, malformed).
var ErrBatch = errors.New("streams: atomic batch refused")

// BatchEntry is one message of an atomic batch with its own compare-and-set.
type BatchEntry struct {
	Publication
	// Expect is the subject's expected last sequence; nil for no check.
	Expect *uint64
}

// Expect returns a pointer to seq, for BatchEntry.Expect.
func Expect(seq uint64) *uint64 { return &seq }

// AppendBatch stores entries as one atomic batch on one stream: all of them
// or none. Any failing compare-and-set rejects the whole batch with a
// *ConflictError naming the first entry with a check. It returns the
// sequences given to the entries, in order.
func (c *Client) AppendBatch(ctx context.Context, entries []BatchEntry) ([]uint64, error) {
	switch {
	case len(entries) == 0:
		return nil, nil
	case len(entries) > MaxBatch:
		return nil, fmt.Errorf("%w: %d messages, at most %d", ErrBatch, len(entries), MaxBatch)
	}
	first, err := c.streamOf(entries[0].Subject)
	if err != nil {
		return nil, err
	}
	for _, e := range entries[1:] {
		st, err := c.streamOf(e.Subject)
		if err != nil {
			return nil, err
		}
		if st.CachedInfo().Config.Name != first.CachedInfo().Config.Name {
			return nil, fmt.Errorf("%w: %s and %s are in different streams", ErrBatch, entries[0].Subject, e.Subject)
		}
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var sent batchSent
	if c.cfg.Intercept != nil {
		sent, err = intercepted(c, ctx, Call{Op: "batch", Subject: entries[0].Subject}, func(ctx context.Context) (batchSent, error) {
			return c.sendBatch(ctx, entries)
		})
	} else {
		sent, err = c.sendBatch(ctx, entries)
	}
	if err != nil {
		return nil, err
	}
	id, reply := sent.id, sent.reply
	var ack struct {
		Error    *jetstream.APIError `json:"error,omitempty"`
		Sequence uint64              `json:"seq"`
		BatchID  string              `json:"batch"`
		Count    int                 `json:"count"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return nil, fmt.Errorf("%w: unreadable ack: %v", ErrBatch, err)
	}
	if ack.Error != nil {
		return nil, c.batchErr(ack.Error, entries)
	}
	if ack.BatchID != id || ack.Count != len(entries) {
		return nil, fmt.Errorf("%w: ack for batch %q of %d, sent %q of %d", ErrBatch, ack.BatchID, ack.Count, id, len(entries))
	}
	seqs := make([]uint64, len(entries))
	for i := range seqs {
		seqs[i] = ack.Sequence - uint64(len(entries)-1-i)
	}
	return seqs, nil
}

// batchSent is a batch as sent: its id, and the answer to its commit.
type batchSent struct {
	id    string
	reply *nats.Msg
}

// sendBatch publishes entries as one atomic batch under a fresh id, and
// waits for the answer to its last message, the commit.
func (c *Client) sendBatch(ctx context.Context, entries []BatchEntry) (batchSent, error) {
	sent := batchSent{id: ulid.Make().String()}
	for i, e := range entries {
		m, err := c.msg(e.Publication)
		if err != nil {
			return batchSent{}, err
		}
		m.Header.Set(hdrBatchID, sent.id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if e.MsgID != "" {
			m.Header.Set(jetstream.MsgIDHeader, e.MsgID)
		}
		if e.Expect != nil {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(*e.Expect, 10))
		}
		if i < len(entries)-1 {
			// Without a reply subject the server answers nothing until
			// the commit, whose ack reports any earlier failure.
			if err := c.nc.PublishMsg(m); err != nil {
				return batchSent{}, c.batchErr(err, entries)
			}
			continue
		}
		m.Header.Set(hdrBatchCommit, "1")
		if sent.reply, err = c.nc.RequestMsgWithContext(ctx, m); err != nil {
			return batchSent{}, c.batchErr(err, entries)
		}
	}
	return sent, nil
}

func (c *Client) batchErr(err error, entries []BatchEntry) error {
	switch code := apiCode(err); {
	case code == codeWrongLastSequence || code == codeWrongLastSequenceConst:
		for _, e := range entries {
			if e.Expect != nil {
				return &ConflictError{Subject: e.Subject, Expected: *e.Expect, Code: code}
			}
		}
		return &ConflictError{Code: code}
	case tooLarge(err):
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	case code != 0:
		return fmt.Errorf("%w: %v", ErrBatch, err)
	}
	return fmt.Errorf("streams: atomic batch: %w", err)
}
