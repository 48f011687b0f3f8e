package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// sse writes one event stream: the handler's frames and the heartbeat's
// comments, under a write deadline so a reader that stopped reading is
// cut. Frames are sent when the stream flushes: it does before it waits
// for more (beat.flush), so the events that came together go in one write.
type sse struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	cancel  context.CancelFunc
	err     error
	unsent  bool
}

var errGone = errors.New("the reader is gone")

// write adds frame to what the stream sends next. (The server's buffer,
// once full, is sent at once, under the same deadline.)
func (s *sse) write(frame []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if !s.unsent {
		// Set once a flush: a write that fills the server's buffer sends
		// under it too.
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	if _, err := s.w.Write(frame); err != nil {
		return s.fail()
	}
	s.unsent = true
	return nil
}

// flush sends what was written.
func (s *sse) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || !s.unsent {
		return s.err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if err := s.rc.Flush(); err != nil {
		return s.fail()
	}
	s.unsent = false
	return nil
}

// fail ends a stream whose write failed; s.mu is held.
func (s *sse) fail() error {
	s.err = errGone
	s.cancel()
	// A reader that stopped reading would hold the connection (and what
	// the server buffered for it) while the server finishes the response:
	// it is cut at once.
	if conn, _, herr := s.rc.Hijack(); herr == nil {
		_ = conn.Close()
	}
	return s.err
}

// stream is an open event stream: ctx ends when the reader goes, the
// gateway drains, or close is called.
type stream struct {
	*sse
	ctx      context.Context
	draining <-chan struct{}
	close    func()
	// beat is the heartbeat, sent by the stream's goroutine while it
	// waits for events.
	beat *beat
}

// openEventStream counts a stream against the caller's limits and writes
// the headers.
func (g *Gateway) openEventStream(w http.ResponseWriter, r *http.Request, c *Caller, headers map[string]string) (*stream, error) {
	slot, err := g.reserve(c)
	if err != nil {
		return nil, err
	}
	return g.startStream(w, r, slot, headers), nil
}

// slot is a stream counted against its caller's and the gateway's bounds,
// taken before a request appends its input, so a refusal for the bounds
// changes nothing. release gives it back once.
type slot struct {
	once    sync.Once
	release func()
}

func (s *slot) free() { s.once.Do(s.release) }

func (g *Gateway) reserve(c *Caller) (*slot, error) {
	release, err := g.openStream(c)
	if err != nil {
		return nil, err
	}
	return &slot{release: release}, nil
}

// startStream writes the headers of a stream that holds slot.
func (g *Gateway) startStream(w http.ResponseWriter, r *http.Request, sl *slot, headers map[string]string) *stream {
	ctx, cancel := context.WithCancel(r.Context())
	s := &sse{w: w, rc: http.NewResponseController(w), timeout: g.cfg.WriteTimeout, cancel: cancel}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	for k, v := range headers {
		h.Set(k, v)
	}
	w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
	return &stream{sse: s, ctx: ctx, draining: g.ctx.Done(), close: func() {
		cancel()
		sl.free()
	}, beat: &beat{every: g.cfg.Heartbeat, flush: s.flush, fn: func() error {
		if err := s.write([]byte(": ping\n\n")); err != nil {
			return err
		}
		return s.flush()
	}}}
}

// watchDrain ends the stream's context when the gateway drains, and
// reports whether that is why it ended.
func (st *stream) drained() bool {
	select {
	case <-st.draining:
		return true
	default:
		return false
	}
}
