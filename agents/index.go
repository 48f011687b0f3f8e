package agents

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/streams"
)

// Index keeps the current revision of every agent in memory, following
// the AGENTS stream, so that a node finds an agent without a read per
// turn. It holds what the stream holds: a deleted agent leaves it.
type Index struct {
	a *Agents

	mu      sync.RWMutex
	current map[string]*Record
	pos     uint64 // the stream sequence folded through
}

// NewIndex returns an index of a's agents; Run fills it.
func NewIndex(a *Agents) *Index {
	return &Index{a: a, current: map[string]*Record{}}
}

// Run follows the stream until ctx ends, starting again after an error
// from where it was.
func (x *Index) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		x.mu.RLock()
		from := x.pos + 1
		x.mu.RUnlock()
		err := x.a.s.Tail(ctx, streams.Agents, []string{x.a.s.Subjects().AllAgents()}, from, func(m *streams.Msg, _ uint64) error {
			x.fold(m)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

func (x *Index) fold(m *streams.Msg) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if m.Seq <= x.pos {
		return
	}
	x.pos = m.Seq
	if x.a.s.Verify(m) != nil {
		return // no node or operator wrote it
	}
	r, err := decode(m)
	if err != nil {
		return // Get reads it again, and says why
	}
	name := strings.TrimPrefix(m.Subject, strings.TrimSuffix(x.a.s.Subjects().AllAgents(), "*"))
	if cur, ok := x.current[name]; ok && cur.Seq > m.Seq {
		return // Lookup read a newer one ahead of the tail
	}
	if r.Deleted {
		delete(x.current, name)
		return
	}
	x.current[name] = r
}

// Lookup returns the agent's current revision: from the index, or, when
// the index does not have it (not caught up with an apply yet), from the
// stream, one read.
func (x *Index) Lookup(ctx context.Context, name string) (*Record, error) {
	x.mu.RLock()
	r, ok := x.current[name]
	x.mu.RUnlock()
	if ok {
		return r, nil
	}
	r, err := x.a.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	if _, newer := x.current[name]; !newer && r.Seq > x.pos {
		// Ahead of the tail: keep it; the tail folds it again, in order.
		x.current[name] = r
	}
	x.mu.Unlock()
	return r, nil
}

// Len is how many agents the index holds.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.current)
}
