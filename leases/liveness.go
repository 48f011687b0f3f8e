package leases

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/vmihailenco/msgpack/v5"
)

// nodeKind prefixes node liveness keys in the lease bucket.
const nodeKind = "node"

// Beat writes or refreshes this owner's node liveness key with ttl. A node
// beats well within its TTL (a third of it, say) for as long as it runs; a
// node whose key is gone, or names another incarnation, is dead, and its
// leases may be reclaimed at once.
func (m *Manager) Beat(ctx context.Context, ttl time.Duration) error {
	_, err := m.Heartbeat(ctx, ttl)
	return err
}

// Heartbeat is Beat that also says whether the key had lapsed before it
// landed: gone (expired, or never written) or naming another incarnation.
// Meanwhile every other node took this one for dead and may have taken
// its work.
func (m *Manager) Heartbeat(ctx context.Context, ttl time.Duration) (lapsed bool, err error) {
	if err := checkTTL(ttl); err != nil {
		return false, err
	}
	key, err := Key(nodeKind, m.owner.ID)
	if err != nil {
		return false, err
	}
	data, err := msgpack.Marshal(&value{Owner: m.owner})
	if err != nil {
		return false, err
	}
	for range 3 {
		e, err := m.s.KVGet(ctx, key)
		switch {
		case errors.Is(err, streams.ErrNotFound):
			lapsed = true
			_, err = m.s.KVCreate(ctx, key, data, ttl)
		case err == nil:
			var v value
			lapsed = msgpack.Unmarshal(e.Value, &v) != nil || v.Owner.Incarnation != m.owner.Incarnation
			_, err = m.s.KVSwap(ctx, key, data, e.Revision, ttl)
		}
		if !errors.Is(err, streams.ErrConflict) {
			return lapsed, err
		}
	}
	return lapsed, errors.New("leases: node liveness kept racing")
}

// TrustedUntil is when a holder that began a write of its lease or
// liveness key at start, with ttl, stops trusting it: ahead of the
// server's expiry by the manager's margin, on this process's clock.
func (m *Manager) TrustedUntil(start time.Time, ttl time.Duration) time.Time {
	return start.Add(ttl - m.margin(ttl))
}

// Alive reports whether owner's node has a liveness key for its
// incarnation.
func (m *Manager) Alive(ctx context.Context, owner Owner) (bool, error) {
	key, err := Key(nodeKind, owner.ID)
	if err != nil {
		return false, err
	}
	e, err := m.s.KVGet(ctx, key)
	if errors.Is(err, streams.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var v value
	if err := msgpack.Unmarshal(e.Value, &v); err != nil {
		// Unreadable is not evidence of death: the claimant waits.
		return false, fmt.Errorf("leases: liveness key %s holds an unreadable value: %w", key, err)
	}
	return v.Owner.Incarnation == owner.Incarnation, nil
}

// Nodes lists the nodes whose liveness keys are live.
func (m *Manager) Nodes(ctx context.Context) ([]Holder, error) { return m.List(ctx, nodeKind+".") }

// dead reports whether there is evidence that holder's process is gone:
// its node's liveness key is gone or names another incarnation, or it ran
// on this machine in this boot and its PID no longer exists. Without
// evidence the holder is presumed alive until its TTL.
func (m *Manager) dead(ctx context.Context, holder Owner) bool {
	ev, err := m.DeathEvidence(ctx, holder)
	return err == nil && ev != ""
}

// DeathEvidence says why holder's process is known to be gone ("pid gone",
// "liveness gone"), or "" when nothing shows it: then it is presumed alive,
// whatever time has passed.
func (m *Manager) DeathEvidence(ctx context.Context, holder Owner) (string, error) {
	if holder.Host != "" && holder.Host == m.owner.Host && holder.Boot != "" && holder.Boot == m.owner.Boot &&
		processGone(holder.PID) {
		return fmt.Sprintf("pid gone: process %d of %s no longer exists on %s", holder.PID, holder, holder.Host), nil
	}
	alive, err := m.Alive(ctx, holder)
	if err != nil || alive {
		return "", err
	}
	return fmt.Sprintf("liveness gone: node %s has no liveness key for incarnation %s", holder.ID, holder.Incarnation), nil
}
