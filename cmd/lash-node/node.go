package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/internal/cli"
	"github.com/lash-run/lash/lifecycle"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/tools/mcptool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
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
	if len(args) == 1 && cli.IsVersionFlag(args[0]) {
		fmt.Fprintln(stdout, "lash-node", nodeVersion())
		return exitOK
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
	watch := newConnWatch()
	nc, err := connect(s, log, watch, &cleanups)
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
	for _, srv := range s.mcpServers {
		src, err := mcptool.New(srv, nodeVersion())
		if err != nil {
			return err
		}
		ts.mcp = append(ts.mcp, src)
	}
	cleanups = append(cleanups, ts.close)
	secret, err := deploymentSecret(s.secretFile, s.data)
	if err != nil {
		return err
	}
	opts := []lash.Option{lash.WithConn(nc), lash.WithStreams(s.streams()), lash.WithModel(s.model), lash.WithProviders(s.providers), lash.WithSecret(secret), lash.WithStreaming(s.stream),
		lash.WithTools(ts.reg), lash.WithMachine(s.machine.Config()), lash.WithLeaseTTL(s.leaseTTL),
		lash.WithToolTimeout(s.toolTimeout), lash.WithConcurrency(s.concurrency), lash.WithLogger(log), lash.WithTurnAttempts(s.turnAttempts), lash.WithAgentBudget(s.maxAgents, s.maxAgentsSession),
		lash.WithProjection(filepath.Join(s.data, "projection")), lash.WithObserver(m.observe)}
	if s.nodeID != "" {
		opts = append(opts, lash.WithNodeID(s.nodeID))
	}
	tp, stopTracing, err := tracing(ctx, s)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, stopTracing) // after the node's close: its last spans
	if tp != nil {
		opts = append(opts, lash.WithTracerProvider(tp))
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
	if err := ts.addBuiltin(node.ProcessTools()...); err != nil {
		return err
	}
	owner := node.Owner()
	log = log.With("node", node.ID())
	m.info(prometheus.Labels{"node": node.ID(), "incarnation": owner.Incarnation, "version": nodeVersion()})
	m.gauge("projection_applied_sequence", "The last SESSIONS sequence the node's projection folded.",
		func() float64 { return float64(node.Projection().Applied()) })
	m.gauge("tools", "Tools offered to the model: built-in and served over NATS.", func() float64 { return float64(ts.count()) })
	m.gauge("live_followers", "Followers of live events from a cursor, deployment-wide: the consumers on the LIVE stream (lash-admin watch, transcript --follow, send --wait, console pages, live.Follow). Plain subscribers to the live subjects are not counted.",
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, err := node.Streams().Consumers(ctx, streams.Live)
			if err != nil {
				return math.NaN()
			}
			return float64(n)
		})

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
	var capi *clientAPI
	if s.api.addr != "off" {
		var addr net.Addr
		if capi, addr, err = serveAPI(&s.api, node.Streams(), api, log); err != nil {
			return err
		}
		cleanups = append(cleanups, func() { capi.drain(context.Background()) })
		log.Info("serving the client API", "addr", "http://"+addr.String())
	}

	// work runs until the drain has finished; the rest stop when it starts.
	work, stopWork := context.WithCancel(context.Background())
	side, stopSide := context.WithCancel(ctx)
	defer stopWork()
	defer stopSide()
	failed := make(chan error, 4)
	var serving, waking sync.WaitGroup
	serving.Add(1)
	go func() {
		defer serving.Done()
		if err := node.Serve(work); err != nil && work.Err() == nil {
			failed <- fmt.Errorf("dispatch: %w", err)
		}
	}()
	waking.Add(4)
	go func() {
		defer waking.Done()
		if err := node.Wake(side); err != nil && side.Err() == nil {
			failed <- fmt.Errorf("wake: %w", err)
		}
	}()
	go func() {
		defer waking.Done()
		if err := node.RunProcesses(side); err != nil && side.Err() == nil {
			failed <- fmt.Errorf("processes: %w", err)
		}
	}()
	go func() {
		defer waking.Done()
		ts.refresh(side, s.toolRefresh, watch.reconnected)
	}()
	go func() {
		defer waking.Done()
		if err := node.RunSweeps(side, s.sweepEvery, lifecycle.SweepConfig{Retention: s.retention}); err != nil && side.Err() == nil {
			failed <- fmt.Errorf("sweeps: %w", err)
		}
	}()
	log.Info("lash-node running", "incarnation", owner.Incarnation, "version", nodeVersion(), "prefix", prefix,
		"tools", ts.count(), "api", nodeapi.Subject(prefix, "*"))

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-watch.lost:
	case runErr = <-failed:
		// A connection closed for good is the cause; what failed with it
		// is a symptom.
		if nc.IsClosed() {
			runErr = closedForGood(nc)
		}
	}
	if runErr != nil {
		log.Error("lash-node failing; draining", "err", runErr)
	}

	// Drain: no new requests or work; running turns finish until the
	// deadline, then stop and release their leases.
	h.draining.Store(true)
	log.Info("draining", "timeout", s.drainTimeout)
	if capi != nil {
		// Clients reconnect to another node's API; their turns go on.
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		capi.drain(actx)
		cancel()
	}
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

// errNATSClosed ends a node whose NATS connection nats.go closed for good:
// the server refused it on reconnect (its credentials no longer hold), or
// it broke the protocol. Nothing would ever arrive again; the node drains
// and exits 1, for its supervisor to start it again.
var errNATSClosed = errors.New("NATS connection closed for good")

// connWatch tells a connection closed for good from one lash-node closed
// itself (in a drain, or after a failed start).
type connWatch struct {
	ours atomic.Bool // set before lash-node closes the connection
	lost chan error  // why the connection was closed for good; at most one
	// reconnected has a value after each reconnect: tools served over
	// NATS may be coming back.
	reconnected chan struct{}
}

func newConnWatch() *connWatch {
	return &connWatch{lost: make(chan error, 1), reconnected: make(chan struct{}, 1)}
}

// options are the watch's handlers, for the connection's options: the
// ClosedHandler, and an ErrorHandler that logs the errors no call returns
// (nats.go's default prints them to stderr, bypassing the log).
func (w *connWatch) options(log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.ClosedHandler(func(nc *nats.Conn) {
			if w.ours.Load() {
				return
			}
			select {
			case w.lost <- closedForGood(nc):
			default:
			}
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if !w.ours.Load() {
				log.Warn("NATS disconnected; reconnecting", "url", nc.ConnectedUrlRedacted(), "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted())
			select {
			case w.reconnected <- struct{}{}:
			default:
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("NATS error", "err", err, "subject", sub.Subject)
				return
			}
			log.Warn("NATS error", "err", err)
		}),
	}
}

// close closes nc as lash-node's own doing.
func (w *connWatch) close(nc *nats.Conn) {
	w.ours.Store(true)
	nc.Close()
}

// closedForGood is errNATSClosed with the connection's last error.
func closedForGood(nc *nats.Conn) error {
	if err := nc.LastError(); err != nil {
		return fmt.Errorf("%w: %v", errNATSClosed, err)
	}
	return fmt.Errorf("%w: no error reported", errNATSClosed)
}

// connect joins the NATS given by the settings, or starts the embedded
// server. The connection reports to watch when it is closed for good.
func connect(s *settings, log *slog.Logger, watch *connWatch, cleanups *[]func()) (*nats.Conn, error) {
	if s.conn.URL != "" {
		nc, err := s.conn.Connect("lash-node", "", watch.options(log)...)
		if err != nil {
			return nil, err
		}
		*cleanups = append(*cleanups, func() { watch.close(nc) })
		log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted())
		checkDurability(&s.conn, log)
		return nc, nil
	}
	listen, err := embeddedListen(s.listen)
	if err != nil {
		return nil, err
	}
	cfg := streams.EmbeddedConfig{StoreDir: filepath.Join(s.data, "nats"), Listen: listen, Logger: log}
	host, _, _ := net.SplitHostPort(s.listen)
	switch {
	case s.embeddedAuth == "nkey":
		seed, err := embeddedNkey(s.data)
		if err != nil {
			return nil, err
		}
		cfg.NkeySeed = seed
		if !loopback(host) {
			log.Warn("the embedded server listens beyond this host: clients need the nkey seed in "+
				filepath.Join(s.data, embeddedNkeyFile), "listen", s.listen)
		}
	case s.embeddedPassword(host):
		pw, err := embeddedPassword(s.data)
		if err != nil {
			return nil, err
		}
		cfg.User, cfg.Password = EmbeddedUser, pw
		if !loopback(host) {
			log.Warn("the embedded server listens beyond this host: clients need user "+EmbeddedUser+" and the password in "+
				filepath.Join(s.data, embeddedPasswordFile), "listen", s.listen)
		}
	}
	e, err := streams.StartEmbedded(cfg)
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, e.Shutdown)
	nc, err := e.Connect(append(append(watch.options(log), nats.Name("lash-node")), s.conn.InboxOptions()...)...)
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, func() { watch.close(nc) })
	auth := "none"
	switch {
	case cfg.User != "":
		auth = "password"
	case cfg.NkeySeed != nil:
		auth = "nkey"
	}
	log.Info("embedded NATS with JetStream running", "url", e.ClientURL(), "data", s.data, "fsync", "always", "auth", auth)
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

// secretFile is the deployment secret's file in the data directory;
// oldSecretFile, its name before the secret signed records too, is read
// when it is there.
const (
	secretFile    = "secret"
	oldSecretFile = "event-secret"
)

// deploymentSecret reads the deployment's secret from path, or, with no
// path, from <data>/secret, made with 32 random bytes on first use.
func deploymentSecret(path, data string) ([]byte, error) {
	if path == "" {
		path = filepath.Join(data, secretFile)
		if old := filepath.Join(data, oldSecretFile); fileExists(old) && !fileExists(path) {
			path = old
		} else if !fileExists(path) {
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return nil, err
			}
			if err := os.WriteFile(path, []byte(hex.EncodeToString(b)), 0o600); err != nil {
				return nil, fmt.Errorf("making the deployment secret: %w", err)
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--secret-file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < 32 {
		return nil, fmt.Errorf("--secret-file %s: %d bytes, at least 32", path, len(b))
	}
	return b, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// EmbeddedUser is the embedded server's one user when it takes a
// password; embeddedPasswordFile, in the data directory, holds it.
// embeddedNkeyFile holds the user nkey seed of --embedded-auth nkey.
const (
	EmbeddedUser         = "lash"
	embeddedPasswordFile = "embedded-password"
	embeddedNkeyFile     = "embedded-nkey.seed"
)

// embeddedNkey reads the embedded server's user nkey seed from the data
// directory, made on first use. lash-admin on the same machine reads it
// there (a bare seed is a credentials file to it).
func embeddedNkey(data string) ([]byte, error) {
	path := filepath.Join(data, embeddedNkeyFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		err = os.WriteFile(path, append(slices.Clone(seed), '\n'), 0o600)
		kp.Wipe() // wipes seed too: it is the key pair's own
		if err != nil {
			return nil, fmt.Errorf("making the embedded server's nkey: %w", err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	seed := bytes.TrimSpace(b)
	if _, err := nkeys.FromSeed(seed); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return seed, nil
}

// embeddedPassword reads the embedded server's password from the data
// directory, made with 128 random bits on first use. lash-admin on the
// same machine reads it there.
func embeddedPassword(data string) (string, error) {
	path := filepath.Join(data, embeddedPasswordFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("making the embedded server's password: %w", err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	pw := string(bytes.TrimSpace(b))
	if pw == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return pw, nil
}
