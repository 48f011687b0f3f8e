package lash

import (
	"container/list"
	"sync"
)

// DefaultStateCache is how many sessions' folded states a node keeps.
const DefaultStateCache = 4096

// WithStateCache sets how many sessions' folded states a node keeps in
// memory (DefaultStateCache; 0 keeps none). A session whose state is kept
// loads by reading only what its log gained since: one read of the log's
// head when nothing did.
func WithStateCache(n int) Option { return func(o *options) { o.stateCache = &n } }

// states keeps the folded state of the sessions this node ran last, the
// most recent first. A run takes its session's state out and puts it back
// when it ends, so no two runs share one; each state is exactly the fold of
// its log through st.rev, whoever wrote the entries after it.
type states struct {
	mu  sync.Mutex
	max int
	lru *list.List // of *state, most recent at the front
	by  map[string]*list.Element
}

func newStates(max int) *states {
	return &states{max: max, lru: list.New(), by: map[string]*list.Element{}}
}

// take removes and returns the kept state of session id, or nil.
func (c *states) take(id string) *state {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.by[id]
	if !ok {
		return nil
	}
	delete(c.by, id)
	return c.lru.Remove(e).(*state)
}

// put keeps st, dropping the least recently used state past the bound.
func (c *states) put(st *state) {
	if st == nil || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.by[st.id]; ok {
		c.lru.Remove(e)
	}
	c.by[st.id] = c.lru.PushFront(st)
	for c.lru.Len() > c.max {
		old := c.lru.Remove(c.lru.Back()).(*state)
		delete(c.by, old.id)
	}
}

// len is the number of states kept.
func (c *states) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
