package lash

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/lifecycle"
)

// DefaultSweepEvery is how often RunSweeps sweeps by default.
const DefaultSweepEvery = 10 * time.Minute

// RunSweeps removes the deployment's garbage every `every` until ctx ends
// (lifecycle.Sweep, ADR 0035), one node of the deployment at a time: a
// sweep runs under the lease "sweep.deployment", and a node that finds it
// held leaves that round to its holder. cfg says what is kept.
func (n *Node) RunSweeps(ctx context.Context, every time.Duration, cfg lifecycle.SweepConfig) error {
	ctx, done, err := n.sideLoop(ctx)
	if err != nil {
		return err
	}
	defer done()
	if every <= 0 {
		every = DefaultSweepEvery
	}
	cfg.Writer = n.opts.nodeID
	// The router keeps deleted subscriptions' histories as long as the
	// sweeps keep them on the stream.
	n.router.SetForget(cfg.Retention)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		swept, err := n.sweepOnce(ctx, cfg)
		// Memory freed since (kept states of deleted sessions, the buffers
		// of a burst, the read models' memtables and caches in C memory)
		// goes back to the system now, not when the runtime's scavenger
		// gets to it: after a burst the node's footprint is back to what
		// it runs on. Once a sweep, it costs a collection.
		debug.FreeOSMemory()
		trimCHeap()
		switch {
		case errors.Is(err, leases.ErrBusy):
		case err != nil && ctx.Err() == nil:
			n.opts.logger.Warn("sweep failed; the next one goes on", "err", err)
		case swept != nil:
			n.opts.logger.Info("swept", "journals", swept.Journals, "steps", swept.Steps, "processes", swept.Processes,
				"sessions", swept.Sessions, "occurrences", swept.Occurrences, "receipts", swept.Receipts, "waits", swept.Waits,
				"marks", swept.Marks, "objects", swept.Objects, "object_bytes", swept.ObjectBytes)
		}
	}
}

// sweepOnce sweeps under the deployment's sweep lease.
func (n *Node) sweepOnce(ctx context.Context, cfg lifecycle.SweepConfig) (*lifecycle.Swept, error) {
	key, err := leases.Key("sweep", "deployment")
	if err != nil {
		return nil, err
	}
	l, err := n.leases.Claim(ctx, key, n.opts.leaseTTL)
	if err != nil {
		return nil, err
	}
	kctx, stop := n.leases.Keep(ctx, l, nil)
	defer func() {
		stop()
		_ = n.leases.Release(context.WithoutCancel(ctx), l)
	}()
	return lifecycle.Sweep(kctx, n.client, cfg)
}
