package streams

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// readBatch is how many messages one fetch asks for.
const readBatch = 256

// Read calls fn, in stream order, for every message that matches filter
// (which may hold wildcards) with sequence at least from, up to the last
// such message stored when Read started. An error from fn stops the read
// and is returned as it is.
//
// Read goes through a consumer, which on a replicated stream may run on a
// follower a moment behind the leader: use it to scan, and decide writes
// with Head and NextOnSubject, which ask the leader.
func (c *Client) Read(ctx context.Context, filter string, from uint64, fn func(*Msg) error) error {
	st, err := c.streamOf(filter)
	if err != nil {
		return err
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}
	if from > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	var cons jetstream.Consumer
	err = retryRead(ctx, func() (err error) {
		cons, err = st.OrderedConsumer(ctx, cfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("streams: read %s: %w", filter, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var batch jetstream.MessageBatch
		// A fetch can reach a server that does not know the new consumer
		// yet; the ordered consumer resumes after the last delivery.
		err := retryRead(ctx, func() (err error) {
			batch, err = cons.FetchNoWait(readBatch)
			return err
		})
		if err != nil {
			return fmt.Errorf("streams: read %s: %w", filter, err)
		}
		n := 0
		for raw := range batch.Messages() {
			n++
			meta, err := raw.Metadata()
			if err != nil {
				return fmt.Errorf("streams: read %s: %w", filter, err)
			}
			m := &Msg{Subject: raw.Subject(), Seq: meta.Sequence.Stream, Header: raw.Headers(), Data: raw.Data(), Time: meta.Timestamp}
			if err := fn(m); err != nil {
				return err
			}
			if meta.NumPending == 0 {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			if transientRead(err) {
				continue
			}
			return fmt.Errorf("streams: read %s: %w", filter, err)
		}
		if n == 0 {
			return nil
		}
	}
}

// Purge removes every message matching filter, for lifecycle rules such as
// dropping a committed turn's journal.
func (c *Client) Purge(ctx context.Context, filter string) error {
	st, err := c.streamOf(filter)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
		return fmt.Errorf("streams: purge %s: %w", filter, err)
	}
	return nil
}
