package lash

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// degradedAfter is how many session runs in a row must fail before the
// node reports itself degraded.
const degradedAfter = 3

// health follows the outcome of the node's session runs.
type health struct {
	mu      sync.Mutex
	failing int
	last    error
}

func (h *health) ran(err error) {
	switch {
	case errors.Is(err, ErrBusy), errors.Is(err, ErrClosed), errors.Is(err, ErrSettingsMismatch),
		errors.Is(err, context.Canceled):
		return // not the node's failure
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.failing, h.last = 0, nil
		return
	}
	h.failing++
	h.last = err
}

// Health is nil while the node's session runs succeed, and says why not
// once several in a row have failed (a store that refuses writes, a
// deployment the node cannot reach): it recovers with the next run that
// succeeds.
func (n *Node) Health() error {
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	if n.health.failing >= degradedAfter {
		return fmt.Errorf("degraded: the last %d session runs failed; the last: %v", n.health.failing, n.health.last)
	}
	return nil
}
