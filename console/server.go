package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/streams"
)

// Source answers the console's requests: lash-admin in production.
type Source interface {
	// Run runs a lash-admin command line (argv, without --json) and writes
	// what it prints with --json to w. Errors wrapping ErrBadRequest or
	// ErrNotFound become 400 and 404.
	Run(ctx context.Context, argv []string, w io.Writer) error
	// Follow is live.Follow on the deployment.
	Follow(ctx context.Context, session string, after uint64, fn func(live.Record) error) error
	// LiveTail is the LIVE stream's last sequence: a page that has just
	// read a transcript follows the events after it.
	LiveTail(ctx context.Context) (uint64, error)
}

// Options set up a console.
type Options struct {
	// ReadOnly refuses every write: a console for viewers.
	ReadOnly bool
	// Version is shown in the page's header.
	Version string
	// MaxStreams bounds the live event streams served at once (64 when 0);
	// past it a page is told to try again later.
	MaxStreams int
	// Hosts are the host names (or addresses) requests may name in their
	// Host header besides localhost and loopback addresses. Any other is
	// refused: a page whose own name was re-pointed at the console's
	// address (DNS rebinding) would otherwise be the console's origin.
	Hosts []string
}

//go:embed assets
var assets embed.FS

// Timings of a live stream: a comment every heartbeat keeps proxies from
// closing it and finds browsers that left; a write that takes longer than
// writeWait ends the stream.
const (
	heartbeat = 20 * time.Second
	writeWait = 30 * time.Second
)

type server struct {
	src     Source
	opts    Options
	streams chan struct{} // one token per live stream being served
}

// Handler serves the console: the page at /, its assets under /assets/ and
// the JSON API under /api/.
func Handler(src Source, opts Options) http.Handler {
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = 64
	}
	s := &server{src: src, opts: opts, streams: make(chan struct{}, opts.MaxStreams)}
	mux := http.NewServeMux()
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.HandleFunc("GET /api/config", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"read_only": opts.ReadOnly, "version": opts.Version})
	})
	mux.HandleFunc("GET /api/sessions/{id}/live", s.live)
	for _, rt := range routes {
		mux.HandleFunc(rt.pattern, s.command(rt))
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no API %s %s", r.Method, r.URL.Path))
	})
	return headers(s.hosted(mux))
}

// hosted answers only requests that name the console's host.
func (s *server) hosted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		ip := net.ParseIP(host)
		ok := strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
		for _, allowed := range s.opts.Hosts {
			ok = ok || strings.EqualFold(host, allowed)
		}
		if !ok {
			writeError(w, http.StatusForbidden, fmt.Sprintf("host %q is not the console's (lash-admin ui --allow-host names others)", r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headers sets what every answer carries: the page runs only its own
// scripts, is never framed, and sends no referrer.
func headers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

func (s *server) command(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := Request{Path: map[string]string{"id": r.PathValue("id"), "turn": r.PathValue("turn"), "name": r.PathValue("name")}, Query: r.URL.Query()}
		if rt.write {
			if status, err := s.writable(r); err != nil {
				writeError(w, status, err.Error())
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
			if err != nil {
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body: %v", err))
				return
			}
			req.Body = body
		}
		argv, err := rt.argv(req)
		if err != nil {
			writeError(w, statusOf(err), err.Error())
			return
		}
		var out bytes.Buffer
		if err := s.src.Run(r.Context(), argv, &out); err != nil {
			writeError(w, statusOf(err), err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(out.Bytes())
	}
}

// writable refuses a write the console must not make: any in read-only
// mode, and one another site's page could have sent (a form or a script
// elsewhere): a write must be JSON, which a browser sends across sites
// only after asking, and its Origin, when given, must be the console's.
func (s *server) writable(r *http.Request) (int, error) {
	if s.opts.ReadOnly {
		return http.StatusForbidden, errors.New("the console is read-only")
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return http.StatusUnsupportedMediaType, fmt.Errorf("content type %q: send application/json", ct)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host != r.Host {
			return http.StatusForbidden, fmt.Errorf("origin %q is not the console's", origin)
		}
	}
	return 0, nil
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, context.Canceled):
		return 499 // the browser left; nobody reads this
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// live streams a session's live events as Server-Sent Events, each with
// its LIVE sequence as id. It starts after the Last-Event-ID a
// reconnecting browser sends, else after ?from= (a sequence, or "now" for
// the stream's tail), else with every event kept.
func (s *server) live(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := streams.Token(id); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("session id: %v", err))
		return
	}
	after, err := s.cursor(r)
	if err != nil {
		writeError(w, statusOf(err), err.Error())
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("%d live streams are open; try again later", cap(s.streams)))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sse := &eventWriter{w: w, rc: http.NewResponseController(w), cancel: cancel}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	// The open event carries the cursor, so a browser that reconnects
	// before any event came resumes from here, not from a later tail.
	sse.send("retry: 1000\nevent: open\nid: %d\ndata: {\"after\":%d}\n\n", after, after)
	beating := make(chan struct{})
	// The heartbeat must stop before the handler returns: nothing may
	// write to w after that.
	defer func() { cancel(); <-beating }()
	go func() {
		defer close(beating)
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sse.send(": ping\n\n")
			}
		}
	}()
	for ctx.Err() == nil {
		err := s.src.Follow(ctx, id, after, func(rec live.Record) error {
			b, err := json.Marshal(rec.Event)
			if err != nil {
				return err
			}
			after = rec.Seq
			return sse.send("id: %d\ndata: %s\n\n", rec.Seq, b)
		})
		var behind *live.BehindError
		switch {
		case ctx.Err() != nil:
		case errors.As(err, &behind):
			b, _ := json.Marshal(map[string]uint64{"after": behind.After, "first": behind.First, "last": behind.Last})
			sse.send("event: behind\ndata: %s\n\n", b)
			after = behind.First - 1
			if behind.After > behind.Last {
				after = 0
			}
			continue
		default:
			// The browser reconnects after the last event it saw.
			msg := "the event stream ended"
			if err != nil {
				msg = err.Error()
			}
			b, _ := json.Marshal(map[string]string{"error": msg})
			sse.send("event: failed\ndata: %s\n\n", b)
		}
		return
	}
}

// cursor is where a live stream starts.
func (s *server) cursor(r *http.Request) (uint64, error) {
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = r.URL.Query().Get("from")
	}
	switch from {
	case "":
		return 0, nil
	case "now":
		return s.src.LiveTail(r.Context())
	}
	n, err := strconv.ParseUint(from, 10, 64)
	if err != nil {
		return 0, BadRequest(fmt.Sprintf("cursor %q: give a sequence or \"now\"", from))
	}
	return n, nil
}

// eventWriter writes a live stream from the follower and the heartbeat.
type eventWriter struct {
	mu     sync.Mutex
	w      io.Writer
	rc     *http.ResponseController
	cancel context.CancelFunc
	failed bool
}

func (e *eventWriter) send(format string, args ...any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return errors.New("the browser is gone")
	}
	e.rc.SetWriteDeadline(time.Now().Add(writeWait))
	_, err := fmt.Fprintf(e.w, format, args...)
	if err == nil {
		err = e.rc.Flush()
	}
	if err != nil {
		e.failed = true
		e.cancel()
	}
	return err
}
