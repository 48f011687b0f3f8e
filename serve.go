package lash

import (
	"context"
	"errors"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/streams"
)

// dispatchConsumer is the durable consumer every node of a deployment
// shares over session inputs.
const dispatchConsumer = "lash-dispatch"

// WithConcurrency caps the sessions one node runs at once. Default 16.
func WithConcurrency(n int) Option { return func(o *options) { o.concurrency = n } }

// dispatchAckWait is how long a delivery stays with a node that shows no
// sign of life: a run renews it every third of it, so the inputs of a node
// that died come back to the others within it.
const dispatchAckWait = 750 * time.Millisecond

// Serve takes session inputs from the deployment's shared dispatch
// consumer and runs their sessions until nothing is pending, until ctx
// ends. Each input is handed out as it arrives. It is acknowledged once its
// session ran dry; one whose node died comes back to another node within
// dispatchAckWait, which reclaims the lease at once on proof of the
// holder's death (or when its TTL runs out) and recovers the turn by
// replay. A session busy elsewhere is handed back for later, so it never
// runs twice at once.
func (n *Node) Serve(ctx context.Context) error {
	d, err := n.client.Dispatcher(ctx, streams.Sessions, dispatchConsumer, n.client.Subjects().AllSessionInputs(), dispatchAckWait)
	if err != nil {
		return err
	}
	limit := n.opts.concurrency
	if limit <= 0 {
		limit = 16
	}
	d.Serve(ctx, limit, func() bool { return !n.isClosing() }, func(dl *streams.Delivery) { n.dispatch(ctx, dl) },
		func(err error) { n.opts.logger.Warn("dispatch fetch failed", "node", n.opts.nodeID, "err", err) })
	return ctx.Err()
}

// dispatch runs the session of one delivered input.
func (n *Node) dispatch(ctx context.Context, dl *streams.Delivery) {
	sid, err := n.client.Subjects().SessionOf(dl.Msg.Subject)
	if err != nil {
		// Nothing derived from such a subject is ever published (its
		// token could be too long for the protocol, or name another
		// session's id): it is set aside, and the projection shows it.
		n.opts.logger.Warn("input set aside: its subject names no session", "seq", dl.Msg.Seq, "err", err)
		n.observe(Event{Kind: EventInputRefused, Err: err})
		_ = dl.Ack()
		return
	}
	// The delivery is kept while the run lives (Dispatcher.Serve).
	cursor, err := n.runServed(ctx, sid)
	var attempt *AttemptError
	switch {
	case err == nil && cursor >= dl.Msg.Seq:
		if err := dl.Ack(); err != nil {
			n.opts.logger.Warn("ack of a dispatched input", "session", sid, "err", err)
		}
	case err == nil:
		// A run can end before this input when its read of the inputs
		// lagged the stream: the input comes back.
		_ = dl.Retry(n.opts.leaseTTL / 4)
	case errors.Is(err, ErrBusy):
		_ = dl.Retry(busyDelay(err, dl.Delivered, n.opts.leaseTTL))
	case errors.Is(err, ErrClosed):
		_ = dl.Retry(0) // for another node, at once
	case errors.Is(err, ErrSettingsMismatch):
		n.opts.logger.Info("session left to a node with its turn settings", "session", sid, "err", err)
		_ = dl.Retry(n.opts.leaseTTL)
	case errors.As(err, &attempt):
		delay := retryDelay(attempt.Attempt)
		n.opts.logger.Warn("session run failed; it will be tried again", "session", sid, "attempt", attempt.Attempt,
			"of", n.turnAttempts(), "in", delay, "err", attempt.Err)
		_ = dl.Retry(delay)
	default:
		if ctx.Err() == nil {
			n.opts.logger.Warn("session run failed; it will be retried", "session", sid, "err", err)
		}
		_ = dl.Retry(n.opts.leaseTTL)
	}
}

// runServed runs a session for a delivery. When this node runs the session
// already, one delivery waits for that run to end and runs it again: an
// input that lands while a run releases the session starts at once, not
// after a retry delay. Others are busy.
func (n *Node) runServed(ctx context.Context, sid string) (uint64, error) {
	for try := 0; ; try++ {
		_, cursor, err := n.Session(sid).run(ctx)
		var held *leases.BusyError
		if !errors.Is(err, ErrBusy) || errors.As(err, &held) || try == 2 {
			return cursor, err // done, or held by another node
		}
		n.mu.Lock()
		ended, here := n.running[sid]
		switch {
		case !here:
			// The run ended since: run again at once.
			n.mu.Unlock()
			continue
		case n.waiting[sid]:
			n.mu.Unlock()
			return cursor, err
		}
		n.waiting[sid] = true
		n.mu.Unlock()
		select {
		case <-ended:
		case <-ctx.Done():
		}
		n.mu.Lock()
		delete(n.waiting, sid)
		n.mu.Unlock()
		if ctx.Err() != nil {
			return cursor, ctx.Err()
		}
	}
}

// busyDelay is when an input of a session running elsewhere comes back.
// Soon at first: the holder may be releasing right now, having found no
// more input; then less and less often, but never later than the lease
// can live unrenewed, so that a holder that died without proof is
// replaced when its TTL runs out.
func busyDelay(err error, delivered uint64, ttl time.Duration) time.Duration {
	delay := 20 * time.Millisecond << min(max(delivered, 1)-1, 16)
	limit := ttl / 2
	var busy *leases.BusyError
	if errors.As(err, &busy) && !busy.Renewed.IsZero() {
		// The holder's lease ends a TTL after its last renewal, by the
		// server's clock: skew between hosts only moves the retry within
		// the bound.
		limit = min(max(ttl-time.Since(busy.Renewed)+50*time.Millisecond, 50*time.Millisecond), ttl)
	}
	return min(delay, limit)
}

func (n *Node) isClosing() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closing
}
