package lash

import (
	"context"
	"errors"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/triggers"
)

// Triggers is the deployment's trigger store, writing as this node.
func (n *Node) Triggers() *triggers.Triggers { return n.trigs }

// deliver records a signal's occurrence and starts the process of each
// subscription it matches (ADR 0024). A signal no subscription can take
// (not a readable JSON signal) was set aside by the caller already.
func (n *Node) deliver(ctx context.Context, m *streams.Msg) error {
	o, ds, err := n.router.Deliver(ctx, m)
	if errors.Is(err, triggers.ErrInvalid) || errors.Is(err, processes.ErrInvalid) || errors.Is(err, processes.ErrConflict) {
		// Refused for good: the delivery is marked failed, with the reason
		// (lash-admin triggers deliveries).
		n.opts.logger.Warn("signal not delivered to subscriptions", "subject", m.Subject, "seq", m.Seq, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	if len(ds) > 0 || len(o.Undelivered) > 0 {
		n.opts.logger.Info("signal delivered", "subject", m.Subject, "occurrence", o.ID, "deliveries", len(ds), "undelivered", len(o.Undelivered))
	}
	return nil
}
