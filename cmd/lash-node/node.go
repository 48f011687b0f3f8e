package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/internal/cli"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// run is lash-node: it returns the exit status. Cancelling ctx drains the
// node.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "demo" {
		return runDemo(ctx, args[1:], stdout, stderr)
	}
	s, fs, err := parseSettings(args)
	if errors.Is(err, flag.ErrHelp) {
		printHelp(stdout, fs, s)
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, usageLine(err))
		return exitUsage
	}
	log := s.logging.Logger(stderr)
	if err := serve(ctx, s, log); err != nil {
		log.Error("lash-node stopped", "err", err)
		return exitFail
	}
	return exitOK
}

// serve runs the node until ctx ends, then drains it. An error is a node
// that could not start or stopped on its own.
func serve(ctx context.Context, s *settings, log *slog.Logger) (err error) {
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	release, err := lockData(s.data)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, release)
	nc, err := connect(s, log, &cleanups)
	if err != nil {
		return err
	}
	m := newMetrics()
	prefix := s.conn.Streams().Prefix
	if prefix == "" {
		prefix = streams.DefaultPrefix
	}
	ts, err := newToolSet(nc, prefix, log, m.toolProblems.Inc)
	if err != nil {
		return err
	}
	opts := []lash.Option{lash.WithConn(nc), lash.WithStreams(s.conn.Streams()), lash.WithModel(s.model),
		lash.WithTools(ts.reg), lash.WithMachine(s.machine.Config()), lash.WithLeaseTTL(s.leaseTTL),
		lash.WithToolTimeout(s.toolTimeout), lash.WithConcurrency(s.concurrency), lash.WithLogger(log),
		lash.WithProjection(filepath.Join(s.data, "projection")), lash.WithObserver(m.observe)}
	if s.nodeID != "" {
		opts = append(opts, lash.WithNodeID(s.nodeID))
	}
	node, err := lash.Open(ctx, opts...)
	if err != nil {
		return err
	}
	closed := false
	cleanups = append(cleanups, func() {
		if !closed {
			_ = node.Close(context.Background())
		}
	})
	owner := node.Owner()
	log = log.With("node", node.ID())
	m.info(prometheus.Labels{"node": node.ID(), "incarnation": owner.Incarnation, "version": nodeVersion()})
	m.gauge("projection_applied_sequence", "The last SESSIONS sequence the node's projection folded.",
		func() float64 { return float64(node.Projection().Applied()) })
	m.gauge("tools", "Tools offered to the model: built-in and served over NATS.", func() float64 { return float64(ts.count()) })

	api, err := nodeapi.Start(node, nodeapi.Config{Version: nodeVersion(), Logger: log, OnRequest: m.request})
	if err != nil {
		return err
	}
	apiStopped := false
	cleanups = append(cleanups, func() {
		if !apiStopped {
			_ = api.Stop()
		}
	})
	// The node's own service answers discovery, so it ends quickly.
	if err := ts.sync(ctx); err != nil {
		log.Warn("tools served over NATS not discovered", "err", err)
	}

	h := &health{nc: nc, node: node}
	if s.http != "off" {
		srv, addr, err := serveHTTP(s.http, h, m, log)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { _ = srv.Close() })
		log.Info("serving /healthz and /metrics", "addr", "http://"+addr.String())
	}

	// work runs until the drain has finished; the rest stop when it starts.
	work, stopWork := context.WithCancel(context.Background())
	side, stopSide := context.WithCancel(ctx)
	defer stopWork()
	defer stopSide()
	failed := make(chan error, 2)
	var serving, waking sync.WaitGroup
	serving.Add(1)
	go func() {
		defer serving.Done()
		if err := node.Serve(work); err != nil && work.Err() == nil {
			failed <- fmt.Errorf("dispatch: %w", err)
		}
	}()
	waking.Add(2)
	go func() {
		defer waking.Done()
		if err := node.Wake(side); err != nil && side.Err() == nil {
			failed <- fmt.Errorf("wake: %w", err)
		}
	}()
	go func() {
		defer waking.Done()
		ts.refresh(side, s.toolRefresh)
	}()
	log.Info("lash-node running", "incarnation", owner.Incarnation, "version", nodeVersion(), "prefix", prefix,
		"tools", ts.count(), "api", nodeapi.Subject(prefix, "*"))

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-failed:
		log.Error("lash-node failing; draining", "err", runErr)
	}

	// Drain: no new requests or work; running turns finish until the
	// deadline, then stop and release their leases.
	h.draining.Store(true)
	log.Info("draining", "timeout", s.drainTimeout)
	apiStopped = true
	if err := api.Stop(); err != nil {
		log.Warn("stopping the node API", "err", err)
	}
	stopSide()
	dctx, cancel := context.WithTimeout(context.Background(), s.drainTimeout)
	defer cancel()
	closed = true
	// Close takes no new work from here on, and stops the waker before it
	// closes the projection the waker reads.
	if err := node.Close(dctx); err != nil {
		log.Warn("drain deadline passed: running turns were stopped; another node finishes them by replay", "err", err)
	}
	waking.Wait()
	stopWork()
	serving.Wait()
	log.Info("drained")
	return runErr
}

// connect joins the NATS given by the settings, or starts the embedded
// server.
func connect(s *settings, log *slog.Logger, cleanups *[]func()) (*nats.Conn, error) {
	if s.conn.URL != "" {
		nc, err := s.conn.Connect("lash-node", "")
		if err != nil {
			return nil, err
		}
		*cleanups = append(*cleanups, nc.Close)
		log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted())
		return nc, nil
	}
	listen, err := embeddedListen(s.listen)
	if err != nil {
		return nil, err
	}
	e, err := streams.StartEmbedded(streams.EmbeddedConfig{StoreDir: filepath.Join(s.data, "nats"), Listen: listen})
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, e.Shutdown)
	nc, err := e.Connect(nats.Name("lash-node"))
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, nc.Close)
	log.Info("embedded NATS with JetStream running", "url", e.ClientURL(), "data", s.data, "fsync", "always")
	return nc, nil
}

// embeddedListen turns port 0 (any free port) into nats-server's spelling.
func embeddedListen(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%w: --listen %q: %v", cli.ErrUsage, addr, err)
	}
	if p, err := strconv.Atoi(port); err == nil && p == 0 {
		port = "-1"
	}
	return net.JoinHostPort(host, port), nil
}
