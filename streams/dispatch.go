package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Dispatcher hands messages of a durable consumer shared by every node:
// each message goes to one node at a time, and comes back to some node if
// it is not acknowledged within the ack wait (its node died, or declined).
type Dispatcher struct {
	c       *Client
	cons    jetstream.Consumer
	ackWait time.Duration
}

// Delivery is one dispatched message.
type Delivery struct {
	Msg *Msg
	// Delivered counts the deliveries of this message, this one included.
	Delivered uint64
	raw       jetstream.Msg
	c         *Client
	// stopKeeping ends the progress notes of Serve, if any, and waits for
	// the last: a note after a retry would bring the message back after
	// the ack wait, not the retry's delay.
	stopKeeping func()
}

func (d *Delivery) settle() {
	if d.stopKeeping != nil {
		d.stopKeeping()
	}
}

// Ack says the message's work is done.
func (d *Delivery) Ack() error {
	d.settle()
	if d.intercepted() {
		return d.send(context.Background(), func(context.Context) error { return d.raw.Ack() })
	}
	return d.raw.Ack()
}

// AckSync is Ack that waits for the server to have taken it: a message
// removed after it (Purge) is then no pending delivery of the consumer.
func (d *Delivery) AckSync(ctx context.Context) error {
	d.settle()
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if d.intercepted() {
		return d.send(ctx, d.raw.DoubleAck)
	}
	return d.raw.DoubleAck(ctx)
}

// Retry hands the message back, to be delivered again after delay.
func (d *Delivery) Retry(delay time.Duration) error {
	d.settle()
	if d.intercepted() {
		return d.send(context.Background(), func(context.Context) error { return d.raw.NakWithDelay(delay) })
	}
	return d.raw.NakWithDelay(delay)
}

// InProgress extends the ack wait while long work goes on.
func (d *Delivery) InProgress() error {
	if d.intercepted() {
		return d.send(context.Background(), func(context.Context) error { return d.raw.InProgress() })
	}
	return d.raw.InProgress()
}

func (d *Delivery) intercepted() bool { return d.c != nil && d.c.cfg.Intercept != nil }

// send makes one of the delivery's acknowledgements through the
// interceptor.
func (d *Delivery) send(ctx context.Context, f func(context.Context) error) error {
	_, err := intercepted(d.c, ctx, Call{Op: "ack", Subject: d.Msg.Subject}, func(ctx context.Context) (none, error) {
		return only(f(ctx))
	})
	return err
}

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
	st, err := c.stream(ctx, s)
	if err != nil {
		return nil, err
	}
	var cons jetstream.Consumer
	err = retryRead(ctx, func() (err error) {
		if c.cfg.Intercept != nil {
			cons, err = c.consumerIntercepted(ctx, st, cfg)
			return err
		}
		cons, err = st.CreateOrUpdateConsumer(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("streams: dispatcher %s: %w", name, err)
	}
	return &Dispatcher{c: c, cons: cons, ackWait: ackWait}, nil
}

func (c *Client) consumerIntercepted(ctx context.Context, st jetstream.Stream, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return intercepted(c, ctx, Call{Op: "consumer", Subject: st.CachedInfo().Config.Name}, func(ctx context.Context) (jetstream.Consumer, error) {
		return st.CreateOrUpdateConsumer(ctx, cfg)
	})
}

// Serve hands out deliveries until ctx ends, each to fn in a goroutine of
// its own, at most slots at once: it asks the server only for as many as
// it has free slots, so a node never holds messages it is not working on.
// While fn runs, the delivery is kept (a progress note every third of the
// ack wait), so the messages of a node that dies come back to the others
// within the ack wait, however long their work takes. fn settles the
// delivery (Ack or Retry), which ends the keeping; one it leaves unsettled
// comes back after the ack wait. A failed fetch goes to onErr and is
// tried again a second later. Serve stops fetching when ctx ends or more
// (if not nil) says no, and returns once every fn returned.
func (d *Dispatcher) Serve(ctx context.Context, slots int, more func() bool, fn func(*Delivery), onErr func(error)) {
	sem := make(chan struct{}, max(slots, 1))
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil && (more == nil || more()) {
		sem <- struct{}{}
		free := 1
		for free < cap(sem) && len(sem) < cap(sem) {
			sem <- struct{}{}
			free++
		}
		got, err := d.Fetch(ctx, free, time.Second, func(dl *Delivery) {
			dl.stopKeeping = d.keep(dl)
			wg.Go(func() {
				defer func() { dl.settle(); <-sem }()
				fn(dl)
			})
		})
		for range free - got {
			<-sem
		}
		if err != nil && ctx.Err() == nil {
			onErr(err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// keep notes progress on dl every third of the ack wait until the
// returned function is called, which waits for the last note.
func (d *Dispatcher) keep(dl *Delivery) func() {
	done, kept := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(kept)
		t := time.NewTicker(d.ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = dl.InProgress()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-kept }) }
}

// Fetch asks for at most max messages, waiting up to wait, and calls fn
// with each one as it arrives: a lone message is handed out at once, not
// when the wait ends. It returns the number handed out.
func (d *Dispatcher) Fetch(ctx context.Context, max int, wait time.Duration, fn func(*Delivery)) (int, error) {
	var batch jetstream.MessageBatch
	var err error
	if d.c.cfg.Intercept != nil {
		batch, err = intercepted(d.c, ctx, Call{Op: "fetch", Subject: d.cons.CachedInfo().Stream}, func(context.Context) (jetstream.MessageBatch, error) {
			return d.cons.Fetch(max, jetstream.FetchMaxWait(wait))
		})
	} else {
		batch, err = d.cons.Fetch(max, jetstream.FetchMaxWait(wait))
	}
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
		fn(&Delivery{raw: raw, c: d.c, Delivered: meta.NumDelivered, Msg: &Msg{Subject: raw.Subject(), Seq: meta.Sequence.Stream,
			Header: raw.Headers(), Data: raw.Data(), Time: meta.Timestamp}})
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !transientRead(err) &&
		!errors.Is(err, context.DeadlineExceeded) {
		return n, fmt.Errorf("streams: fetch: %w", err)
	}
	return n, ctx.Err()
}
