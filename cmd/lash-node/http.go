package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// healthWait bounds how long /healthz waits for the projection to fold
// what the stream holds.
var healthWait = 2 * time.Second

// health says whether the node can do its work.
type health struct {
	nc       *nats.Conn
	node     *lash.Node
	draining atomic.Bool
}

// check returns nil when the node is connected to NATS, its session runs
// do not keep failing (a store that refuses writes, say), and its
// projection runs: it folds, within healthWait, everything the SESSIONS
// stream held when asked. Otherwise it says why not.
func (h *health) check(ctx context.Context) error {
	if h.draining.Load() {
		return errors.New("draining")
	}
	if !h.nc.IsConnected() {
		return fmt.Errorf("not connected to NATS (%s)", h.nc.Status())
	}
	if err := h.node.Health(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, healthWait)
	defer cancel()
	last, err := h.node.Streams().LastSeq(ctx, streams.Sessions)
	if err != nil {
		return fmt.Errorf("cannot read the SESSIONS stream: %v", err)
	}
	p := h.node.Projection()
	if err := p.WaitFor(ctx, last); err != nil {
		return fmt.Errorf("projection is not running: it folded through %d, the stream holds %d", p.Applied(), last)
	}
	return nil
}

func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := h.check(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// serveHTTP listens on addr and serves /healthz and /metrics until the
// returned server is shut down. The listener is open on return.
func serveHTTP(addr string, h *health, m *metrics, log *slog.Logger) (*http.Server, net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--http: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", h)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{log}}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "err", err)
		}
	}()
	return srv, ln.Addr(), nil
}

// slogPrinter lets promhttp log through slog.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Error("metrics: " + fmt.Sprint(v...)) }
