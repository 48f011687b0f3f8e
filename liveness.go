package lash

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lash-run/lash/leases"
)

// errLivenessLapsed ends the session runs of a node that no longer trusts
// its liveness key: from then on any node may take it for dead and claim
// its sessions at once (leases.Manager.Claim), whatever their own leases
// say. It is a lease loss to the run.
var errLivenessLapsed = fmt.Errorf("%w: the node's liveness lapsed: other nodes may take it for dead and its sessions over", leases.ErrLost)

// aliveness is the context session runs go on under: it ends when the
// node's trust in its liveness key does (by its own clock, not at the
// next beat), or when a beat finds the key gone, and a new one begins with
// the next beat that lands.
type aliveness struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	until  time.Time
	timer  *time.Timer
}

func newAliveness() *aliveness {
	a := &aliveness{}
	a.ctx, a.cancel = context.WithCancelCause(context.Background())
	a.timer = time.AfterFunc(time.Hour, a.expire)
	a.timer.Stop()
	return a
}

// context is what runs begun now go on under.
func (a *aliveness) context() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctx
}

// trust says a beat landed: the key is the node's until until.
func (a *aliveness) trust(until time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ctx.Err() != nil {
		a.ctx, a.cancel = context.WithCancelCause(context.Background())
	}
	a.until = until
	a.timer.Reset(time.Until(until))
}

// lapse ends the runs' context now.
func (a *aliveness) lapse() {
	if !holderGuard {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancel(errLivenessLapsed)
}

func (a *aliveness) expire() {
	if !holderGuard {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !time.Now().Before(a.until) {
		a.cancel(errLivenessLapsed)
	}
}

func (a *aliveness) stop() { a.timer.Stop() }
