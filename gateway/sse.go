package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// sse writes one event stream: the handler's frames and the heartbeat's
// comments, each flushed at once, each under a write deadline so a reader
// that stopped reading is cut.
type sse struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	cancel  context.CancelFunc
	err     error
}

var errGone = errors.New("the reader is gone")

func (s *sse) write(frame []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	_, err := s.w.Write(frame)
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil {
		s.err = errGone
		s.cancel()
		return s.err
	}
	return nil
}

// stream is an open event stream: ctx ends when the reader goes, the
// gateway drains, or close is called.
type stream struct {
	*sse
	ctx      context.Context
	draining <-chan struct{}
	close    func()
}

// openEventStream counts a stream against the caller's limits, writes the
// headers and starts the heartbeat.
func (g *Gateway) openEventStream(w http.ResponseWriter, r *http.Request, c *Caller, headers map[string]string) (*stream, error) {
	release, err := g.openStream(c)
	if err != nil {
		return nil, err
	}
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
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		t := time.NewTicker(g.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = s.write([]byte(": ping\n\n"))
			}
		}
	}()
	// Nothing may write to w once the handler returns: close waits for
	// the heartbeat.
	return &stream{sse: s, ctx: ctx, draining: g.ctx.Done(), close: func() {
		cancel()
		<-beating
		release()
	}}, nil
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
