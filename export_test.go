package lash

import (
	"context"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/triggers"
)

// withBoundary stops the driver at named points, as a crash would.
func withBoundary(f func(string) error) Option { return func(o *options) { o.boundary = f } }

func withRouter(f func(*triggers.RouterConfig)) Option { return func(o *options) { o.router = f } }

// parked lists every call parked on a built-in ticket, as the projection
// knows them once it has folded everything the stream holds now: for
// tests (waking never lists them all; operators use ParkedWaits).
func (n *Node) parked(ctx context.Context) ([]parkedCall, error) {
	if err := n.projectionCaughtUp(ctx); err != nil {
		return nil, err
	}
	return parkedIn(n.proj)
}

// withHold calls hold as each signal or fired timer is taken.
func withHold(hold func(kind, subject string)) Option { return func(o *options) { o.hold = hold } }

// withLeaseStore wraps the store of the node's leases and liveness.
func withLeaseStore(f func(leases.Store) leases.Store) Option {
	return func(o *options) { o.leaseStore = f }
}
