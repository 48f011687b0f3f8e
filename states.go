package lash

import (
	"container/list"
	"sync"

	"github.com/lash-run/lash/turn"
)

// DefaultStateCache is how many sessions' folded states a node keeps, and
// DefaultStateBytes about how many bytes of conversation they may hold in
// all. The bytes are few next to what a miss costs (a snapshot and the log
// after it), and the Go runtime keeps the metadata and the half-empty
// spans of the largest heap it had: at 256 MiB, a burst of a thousand
// sessions with 70 KiB tool results left the node 1.25x its memory before.
const (
	DefaultStateCache = 4096
	DefaultStateBytes = 32 << 20
)

// WithStateCache sets how many sessions' folded states a node keeps in
// memory (DefaultStateCache; 0 keeps none) and about how many bytes of
// conversation they may hold in all (DefaultStateBytes; a state that wrote
// a snapshot counts the encoding it keeps for the next one too). A kept
// session runs without reading its log unless another node wrote to it
// since.
func WithStateCache(sessions int, bytes int64) Option {
	return func(o *options) { o.stateCache, o.stateBytes = &sessions, bytes }
}

// states keeps the folded state of the sessions this node ran last, the
// most recent first, within a count and a size. A run takes its session's
// state out and puts it back when it ends, so no two runs share one; each
// state is exactly the fold of its log through st.rev, whoever wrote the
// entries after it.
type states struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	bytes    int64
	lru      *list.List // of *state, most recent at the front
	by       map[string]*list.Element
}

func newStates(max int, maxBytes int64) *states {
	if maxBytes <= 0 {
		maxBytes = DefaultStateBytes
	}
	return &states{max: max, maxBytes: maxBytes, lru: list.New(), by: map[string]*list.Element{}}
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
	st := c.lru.Remove(e).(*state)
	c.bytes -= st.size
	return st
}

// put keeps st, dropping the least recently used states past the bounds;
// a state larger than the whole size bound is not kept.
func (c *states) put(st *state) {
	if st == nil || c.max <= 0 || st.size > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.by[st.id]; ok {
		c.bytes -= c.lru.Remove(e).(*state).size
	}
	c.by[st.id] = c.lru.PushFront(st)
	c.bytes += st.size
	for c.lru.Len() > c.max || c.bytes > c.maxBytes {
		old := c.lru.Remove(c.lru.Back()).(*state)
		delete(c.by, old.id)
		c.bytes -= old.size
	}
}

// keyBytes is about what a remembered input key takes in memory: the
// key, its use and the map's share.
func keyBytes(k string) int64 { return 80 + int64(len(k)) }

// messageBytes is about what messages take in memory.
func messageBytes(ms []turn.Message) int64 {
	var n int64
	for i := range ms {
		m := &ms[i]
		n += 96 + int64(len(m.Text)+len(m.CallID)+len(m.Name))
		for _, c := range m.ToolCalls {
			n += 48 + int64(len(c.ID)+len(c.Name)+len(c.Arguments))
		}
	}
	return n
}

// framed returns st's history as turn.Start.Frame wants it: with a free
// element before it and room after it. It moves the history there when it
// is not (a state read from a snapshot, say); then the history's appends
// keep it there.
func (st *state) framed() []turn.Message {
	n := len(st.history)
	if !st.inFrame(n) {
		st.reframe(n)
	}
	return st.frame[:1+n]
}

// extend appends msgs to the history, in its frame.
func (st *state) extend(msgs []turn.Message) {
	if n := len(st.history) + len(msgs); !st.inFrame(n) {
		st.reframe(n)
	}
	st.history = append(st.history, msgs...)
}

// inFrame reports whether the history lives in its frame, with room for n
// messages.
func (st *state) inFrame(n int) bool {
	return cap(st.frame) >= 1+n && (len(st.history) == 0 || &st.frame[1:cap(st.frame)][0] == &st.history[0])
}

// reframe moves the history into a new frame with room for n messages and
// a turn's worth more.
func (st *state) reframe(n int) {
	f := make([]turn.Message, 1+len(st.history), 1+n+16+n/4)
	copy(f[1:], st.history)
	st.frame, st.history = f, f[1:]
}
