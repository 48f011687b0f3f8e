package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// EmbeddedConfig configures the in-process nats-server lash runs when no
// NATS URL is given.
type EmbeddedConfig struct {
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// Listen is the client listener, host:port. Empty means loopback on the
	// standard port 4222; "none" means no listener (in-process only).
	Listen string
	// NoSync turns off fsync before acknowledgement. Off by default: an
	// acknowledged write must survive power loss.
	NoSync bool
	// ServerName defaults to "lash".
	ServerName string
	// ReadyTimeout bounds startup. Default 10s.
	ReadyTimeout time.Duration
	// User and Password, if set, are the one user the server admits:
	// clients without them are refused. Empty: no authentication (fit for
	// a loopback listener only).
	User, Password string
	// NkeySeed, if set (a user nkey seed, "SU..."), is the one user the
	// server admits instead: clients prove they hold the seed, which never
	// crosses the wire.
	NkeySeed []byte
	// Logger receives the server's log: its warnings and errors at their
	// levels, its notices at debug, an error it cannot run past (a store
	// directory it cannot use, a port it cannot listen on) at error. Nil
	// discards it; a fatal error during start ends StartEmbedded either way.
	Logger *slog.Logger
}

// Embedded is a running in-process nats-server with JetStream.
type Embedded struct {
	srv            *server.Server
	user, password string
	nkey           nats.Option
}

// embeddedSyncInterval is how often the embedded server's store syncs and
// compacts its blocks.
const embeddedSyncInterval = 10 * time.Second

// StartEmbedded starts the server and waits until it accepts connections.
// A fatal error the server reports while it starts (a store directory it
// cannot create or write, a port in use) ends the wait at once and is in
// the returned error.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("streams: embedded server needs a store directory")
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		SyncAlways: !cfg.NoSync,
		// The store's periodic pass also compacts blocks that deletes left
		// mostly empty: at the default two minutes, a burst of deleted
		// sessions kept its blocks (and the 8 MiB caches a read of them
		// loads) that long after a sweep. It fsyncs what a lazy server
		// holds, too.
		SyncInterval: embeddedSyncInterval,
		NoSigs:       true,
	}
	if opts.ServerName == "" {
		opts.ServerName = "lash"
	}
	if cfg.User != "" {
		opts.Username, opts.Password = cfg.User, cfg.Password
	}
	var nkey nats.Option
	if len(cfg.NkeySeed) != 0 {
		// A key pair wipes the seed it was made from: give it copies.
		kp, err := nkeys.FromSeed(slices.Clone(cfg.NkeySeed))
		if err != nil {
			return nil, fmt.Errorf("streams: embedded server's nkey seed: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil || !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("streams: embedded server's nkey seed is not a user's (SU...)")
		}
		opts.Nkeys = []*server.NkeyUser{{Nkey: pub}}
		seed := slices.Clone(cfg.NkeySeed)
		nkey = nats.Nkey(pub, func(nonce []byte) ([]byte, error) {
			kp, err := nkeys.FromSeed(slices.Clone(seed))
			if err != nil {
				return nil, err
			}
			defer kp.Wipe()
			return kp.Sign(nonce)
		})
		kp.Wipe()
	}
	switch cfg.Listen {
	case "none":
		opts.DontListen = true
	case "":
		opts.Host, opts.Port = "127.0.0.1", 4222
	default:
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("streams: listen address %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("streams: listen port %q: %w", port, err)
		}
		opts.Host, opts.Port = host, p
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("streams: embedded server: %w", err)
	}
	log := newServerLogger(cfg.Logger)
	srv.SetLogger(log, false, false)
	go srv.Start()
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if err := waitReady(srv, log, cfg.StoreDir, timeout); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, err
	}
	return &Embedded{srv: srv, user: cfg.User, password: cfg.Password, nkey: nkey}, nil
}

// readyPoll is how long one readiness check of the server may wait: how
// soon a fatal error is noticed.
const readyPoll = 50 * time.Millisecond

// waitReady waits until srv accepts connections, failing at once when it
// reports a fatal error: after one, nats-server's Start gives up and the
// server would never be ready.
func waitReady(srv *server.Server, log *serverLogger, storeDir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ready := srv.ReadyForConnections(readyPoll)
		// A fatal error wins over readiness: the server may have opened its
		// listener and then failed.
		if err := log.fatalError(); err != nil {
			return fmt.Errorf("streams: embedded server (store directory %s): %w", storeDir, err)
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("streams: embedded server not ready after %s", timeout)
		}
	}
}

// serverLogger is nats-server's Logger over slog. nats-server's own
// loggers exit the process on Fatalf; this one logs at error and keeps the
// first fatal error for StartEmbedded.
type serverLogger struct {
	log *slog.Logger // nil: discard

	mu    sync.Mutex
	fatal string
}

func newServerLogger(log *slog.Logger) *serverLogger {
	if log != nil {
		log = log.With("component", "nats-server")
	}
	return &serverLogger{log: log}
}

// fatalError is the first fatal error the server reported, or nil.
func (l *serverLogger) fatalError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatal == "" {
		return nil
	}
	return errors.New(l.fatal)
}

func (l *serverLogger) emit(level slog.Level, format string, v []any) {
	if l.log == nil || !l.log.Enabled(context.Background(), level) {
		return
	}
	// nats-server indents some lines (a stream's under its account).
	l.log.Log(context.Background(), level, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (l *serverLogger) Noticef(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.emit(slog.LevelError, format, v) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.emit(slog.LevelDebug, format, v) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.emit(slog.LevelDebug, format, v) }

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = msg
	}
	l.mu.Unlock()
	l.emit(slog.LevelError, "%s", []any{msg})
}

// Connect opens an in-process connection, as the server's user if it
// has one.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	if e.user != "" {
		opts = append(opts, nats.UserInfo(e.user, e.password))
	}
	if e.nkey != nil {
		opts = append(opts, e.nkey)
	}
	return nats.Connect("", append(opts, nats.InProcessServer(e.srv))...)
}

// ClientURL is the listener's URL, empty if there is none.
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Server is the underlying server.
func (e *Embedded) Server() *server.Server { return e.srv }

// Shutdown stops the server and waits for it to finish.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
