package leases

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Keep renews l every third of its TTL until the returned stop is called,
// by one rule for every plane: a renewal that fails for a moment (no
// answer, a lost connection) is tried again at the next tick; the lease is
// lost when a renewal is refused (another holder has the key) or when its
// expiry (Lease.ExpiresAt) passes with no renewal answered, since another
// node may take it from then on. Loss ends the returned context, derived
// from ctx, with a cause that wraps ErrLost; onRetry, if not nil, hears of
// each failure that is tried again.
//
// A renewal in flight is not cut short when ctx ends: one that landed must
// move the lease's revision, or a release after it would miss and leave the
// key held for a TTL. stop waits for it, so a Release after stop uses the
// lease's last revision.
func (m *Manager) Keep(ctx context.Context, l *Lease, onRetry func(error)) (context.Context, func()) {
	kctx, cancel := context.WithCancelCause(ctx)
	halt, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(max(l.TTL/3, 10*time.Millisecond))
		defer tick.Stop()
		_, expires := l.Current()
		expiry := time.NewTimer(time.Until(expires))
		defer expiry.Stop()
		for {
			select {
			case <-halt:
				return
			case <-kctx.Done():
				return
			case <-expiry.C:
				if !selfExpiry {
					continue
				}
				cancel(fmt.Errorf("%w: %s (token %d) not renewed before it expired", ErrLost, l.Key, l.Token))
				return
			case <-tick.C:
			}
			_, expires := l.Current()
			rctx, rcancel := context.WithDeadline(context.WithoutCancel(kctx), expires)
			err := m.Renew(rctx, l)
			rcancel()
			switch {
			case err == nil:
				_, expires = l.Current()
				expiry.Reset(time.Until(expires))
			case errors.Is(err, ErrLost) && selfExpiry:
				cancel(err)
				return
			case onRetry != nil:
				onRetry(err)
			}
		}
	}()
	var once sync.Once
	return kctx, func() {
		once.Do(func() {
			close(halt)
			<-done
		})
	}
}
