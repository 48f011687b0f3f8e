package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/streams"
)

// hub follows the LIVE stream once for the whole gateway, with one ordered
// consumer over every session's subject, and hands each event to the
// streams open on its session. A stream that starts behind the hub reads
// what it missed from the stream first (backfill), then takes the hub's
// events after the last it read: each event once, in order, with no gap.
// Ten thousand idle streams cost ten thousand map entries, not ten
// thousand consumers on the servers.
type hub struct {
	c   *streams.Client
	log *slog.Logger

	mu    sync.Mutex
	subs  map[string]map[*tap]struct{}
	pos   uint64 // the last sequence handed out (or the tail when the hub started)
	ready chan struct{}
	err   error // why the hub is not following, while it is not
	// back closes when the hub follows again after err.
	back chan struct{}
}

// tapBytes bounds what a stream may hold unsent: a reader slower than the
// events is cut (it resumes from its cursor) rather than buffered without
// bound.
const tapBytes = 1 << 20

// tap is one stream's place in the hub.
type tap struct {
	session string
	mu      sync.Mutex
	queue   []live.Record
	bytes   int
	cut     error // set once: the tap gets nothing more
	signal  chan struct{}
}

var errSlow = errors.New("the reader fell more than 1 MiB behind the events")

func (t *tap) push(r live.Record, size int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut != nil {
		return
	}
	if t.bytes+size > tapBytes {
		t.cut, t.queue = errSlow, nil
	} else {
		t.queue = append(t.queue, r)
		t.bytes += size
	}
	select {
	case t.signal <- struct{}{}:
	default:
	}
}

func (t *tap) stop(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut == nil {
		t.cut = err
	}
	select {
	case t.signal <- struct{}{}:
	default:
	}
}

// take returns what is queued, or the error that cut the tap once the
// queue is empty.
func (t *tap) take() ([]live.Record, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.queue
	t.queue, t.bytes = nil, 0
	if len(q) == 0 {
		return nil, t.cut
	}
	return q, nil
}

func newHub(c *streams.Client, log *slog.Logger) *hub {
	return &hub{c: c, log: log, subs: map[string]map[*tap]struct{}{}, ready: make(chan struct{})}
}

// run follows LIVE until ctx ends. On an error (a server restart makes a
// memory stream anew) it cuts every tap, so its reader resumes from its
// cursor, and follows again from the tail, waiting at most maxBackoff
// between tries.
func (h *hub) run(ctx context.Context) {
	subject := h.c.Config().Prefix + ".live.>"
	backoff := 100 * time.Millisecond
	const maxBackoff = 5 * time.Second
	for ctx.Err() == nil {
		_, last, err := h.c.Bounds(ctx, streams.Live)
		if err == nil {
			h.mu.Lock()
			h.pos, h.err = last, nil
			if h.back != nil {
				close(h.back)
				h.back = nil
			}
			h.mu.Unlock()
			h.markReady()
			backoff = 100 * time.Millisecond
			tctx, stop := context.WithCancelCause(ctx)
			go h.watchStream(tctx, stop)
			err = h.c.Tail(tctx, streams.Live, []string{subject}, last+1, func(m *streams.Msg, _ uint64) error {
				h.dispatch(m)
				return nil
			})
			if c := context.Cause(tctx); ctx.Err() == nil && c != nil && !errors.Is(c, context.Canceled) {
				err = c
			}
			stop(nil)
		}
		if ctx.Err() != nil {
			break
		}
		h.log.Warn("gateway: following live events failed; following again", "err", err, "in", backoff)
		h.mu.Lock()
		h.err = &errHub{err}
		if h.back == nil {
			h.back = make(chan struct{})
		}
		for _, taps := range h.subs {
			for t := range taps {
				t.stop(h.err)
			}
		}
		h.mu.Unlock()
		h.markReady() // a hub that never followed answers with its error
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = errors.New("the gateway is stopping")
	if h.back != nil {
		close(h.back) // waiters see it stop
		h.back = nil
	}
	for _, taps := range h.subs {
		for t := range taps {
			t.stop(h.err)
		}
	}
	h.markReadyLocked()
}

// errHub: the gateway does not follow live events now (the servers are
// unreachable, or LIVE was made anew and it follows again).
type errHub struct{ err error }

func (e *errHub) Error() string { return "live events: " + e.err.Error() }

var errRemade = errors.New("the LIVE stream was made anew (a server restarted): events before it are gone")

// watchStream ends the follow when LIVE was made anew (a memory stream
// after its server restarted): the ordered consumer would wait at the old
// stream's next sequence, which the new one reaches only much later.
func (h *hub) watchStream(ctx context.Context, stop context.CancelCauseFunc) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, last, err := h.c.Bounds(ctx, streams.Live)
		h.mu.Lock()
		pos := h.pos
		h.mu.Unlock()
		if err == nil && last < pos {
			stop(errRemade)
			return
		}
	}
}

func (h *hub) markReady() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.markReadyLocked()
}

func (h *hub) markReadyLocked() {
	select {
	case <-h.ready:
	default:
		close(h.ready)
	}
}

func (h *hub) dispatch(m *streams.Msg) {
	tok, ok := strings.CutPrefix(m.Subject, h.c.Config().Prefix+".live.")
	session, err := streams.ParseToken(tok)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pos = m.Seq
	taps := h.subs[session]
	if !ok || err != nil || len(taps) == 0 {
		return
	}
	rec := live.Record{Seq: m.Seq, Event: decodeEvent(session, m)}
	for t := range taps {
		t.push(rec, len(m.Data)+64)
	}
}

func decodeEvent(session string, m *streams.Msg) live.Event {
	var ev live.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return live.Event{Type: "unreadable", Session: session, At: m.Time, Error: err.Error()}
	}
	return ev
}

// open adds a tap for session; it returns the hub's position: every event
// after it reaches the tap.
func (h *hub) open(ctx context.Context, session string) (*tap, uint64, error) {
	if err := h.following(ctx); err != nil {
		return nil, 0, err
	}
	defer h.mu.Unlock()
	t := &tap{session: session, signal: make(chan struct{}, 1)}
	if h.subs[session] == nil {
		h.subs[session] = map[*tap]struct{}{}
	}
	h.subs[session][t] = struct{}{}
	return t, h.pos, nil
}

func (h *hub) close(t *tap) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[t.session], t)
	if len(h.subs[t.session]) == 0 {
		delete(h.subs, t.session)
	}
}

// position is the hub's position once it follows.
func (h *hub) position(ctx context.Context) (uint64, error) {
	if err := h.following(ctx); err != nil {
		return 0, err
	}
	defer h.mu.Unlock()
	return h.pos, nil
}

// following returns, with h.mu held, once the hub follows LIVE, or its
// error (h.mu not held). Following again takes a moment (the backoff,
// then one read): it waits for that a while rather than refuse.
func (h *hub) following(ctx context.Context) error {
	select {
	case <-h.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	h.mu.Lock()
	if h.err != nil && h.back != nil {
		back := h.back
		h.mu.Unlock()
		select {
		case <-back:
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		h.mu.Lock()
	}
	if err := h.err; err != nil {
		h.mu.Unlock()
		return err
	}
	return nil
}

// follow calls fn with each live event of session after sequence after,
// in order, each once, until ctx ends or fn fails. A cursor whose events
// the stream no longer keeps all of is a *live.BehindError.
func (h *hub) follow(ctx context.Context, session string, after uint64, fn func(live.Record) error, idle *beat) error {
	t, pos, err := h.open(ctx, session)
	if err != nil {
		return err
	}
	defer h.close(t)
	return h.from(ctx, t, pos, after, fn, idle)
}

// beat is what a stream does while no event comes: flush what it wrote
// before it waits, and every so often fn (a heartbeat), on the stream's
// own goroutine, so an idle stream costs no goroutine of its own.
type beat struct {
	every time.Duration
	fn    func() error
	flush func() error
}

// from is follow on a tap opened at hub position pos.
func (h *hub) from(ctx context.Context, t *tap, pos, after uint64, fn func(live.Record) error, idle *beat) error {
	session := t.session
	sent := after
	if after < pos {
		first, last, err := h.c.Bounds(ctx, streams.Live)
		if err != nil {
			return err
		}
		if after+1 < first || after > last {
			return &live.BehindError{After: after, First: first, Last: last}
		}
		subj, err := h.c.Subjects().Live(session)
		if err != nil {
			return err
		}
		err = h.c.Read(ctx, subj, after+1, func(m *streams.Msg) error {
			sent = m.Seq
			return fn(live.Record{Seq: m.Seq, Event: decodeEvent(session, m)})
		})
		if err != nil {
			return err
		}
	} else if after > pos {
		// Past the hub: the stream may have been made anew (a memory
		// stream after its server restarted).
		if _, last, err := h.c.Bounds(ctx, streams.Live); err == nil && after > last {
			return &live.BehindError{After: after, First: 0, Last: last}
		}
	}
	var timer *time.Timer
	for {
		recs, err := t.take()
		for _, r := range recs {
			if r.Seq <= sent {
				continue
			}
			sent = r.Seq
			if err := fn(r); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			continue
		}
		var ticks <-chan time.Time
		if idle != nil {
			if err := idle.flush(); err != nil {
				return err
			}
			if timer == nil {
				timer = time.NewTimer(idle.every)
				defer timer.Stop()
			}
			ticks = timer.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.signal:
		case <-ticks:
			if err := idle.fn(); err != nil {
				return err
			}
			timer.Reset(idle.every)
		}
	}
}
