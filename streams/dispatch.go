package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Dispatcher hands messages of a durable consumer shared by every node:
// each message goes to one node at a time, and comes back to some node if
// it is not acknowledged within the ack wait (its node died, or declined).
type Dispatcher struct {
	cons jetstream.Consumer
}

// Delivery is one dispatched message.
type Delivery struct {
	Msg *Msg
	// Delivered counts the deliveries of this message, this one included.
	Delivered uint64
	raw       jetstream.Msg
}

// Ack says the message's work is done.
func (d *Delivery) Ack() error { return d.raw.Ack() }

// Retry hands the message back, to be delivered again after delay.
func (d *Delivery) Retry(delay time.Duration) error { return d.raw.NakWithDelay(delay) }

// InProgress extends the ack wait while long work goes on.
func (d *Delivery) InProgress() error { return d.raw.InProgress() }

// Dispatcher binds the durable consumer name on stream s over filters,
// creating it if needed, or updating its filters and ack wait. ackWait is
// how long a node may hold a message without a sign of life.
func (c *Client) Dispatcher(ctx context.Context, s Stream, name string, filters []string, ackWait time.Duration) (*Dispatcher, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	cfg := jetstream.ConsumerConfig{
		Durable:        name,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxAckPending:  -1,
		Replicas:       c.cfg.Replicas,
	}
	var cons jetstream.Consumer
	err := retryRead(ctx, func() (err error) {
		cons, err = c.streams[s].CreateOrUpdateConsumer(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("streams: dispatcher %s: %w", name, err)
	}
	return &Dispatcher{cons: cons}, nil
}

// Fetch asks for at most max messages, waiting up to wait, and calls fn
// with each one as it arrives: a lone message is handed out at once, not
// when the wait ends. It returns the number handed out.
func (d *Dispatcher) Fetch(ctx context.Context, max int, wait time.Duration, fn func(*Delivery)) (int, error) {
	batch, err := d.cons.Fetch(max, jetstream.FetchMaxWait(wait))
	if err != nil {
		if transientRead(err) || errors.Is(err, jetstream.ErrNoMessages) {
			return 0, nil
		}
		return 0, fmt.Errorf("streams: fetch: %w", err)
	}
	n := 0
	for raw := range batch.Messages() {
		meta, err := raw.Metadata()
		if err != nil {
			// Not a stream message: nothing to run or acknowledge.
			continue
		}
		n++
		fn(&Delivery{raw: raw, Delivered: meta.NumDelivered, Msg: &Msg{Subject: raw.Subject(), Seq: meta.Sequence.Stream,
			Header: raw.Headers(), Data: raw.Data(), Time: meta.Timestamp}})
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !transientRead(err) &&
		!errors.Is(err, context.DeadlineExceeded) {
		return n, fmt.Errorf("streams: fetch: %w", err)
	}
	return n, ctx.Err()
}
