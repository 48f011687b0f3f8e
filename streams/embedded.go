package streams

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
}

// Embedded is a running in-process nats-server with JetStream.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts the server and waits until it accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("streams: embedded server needs a store directory")
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		SyncAlways: !cfg.NoSync,
		NoSigs:     true,
		NoLog:      true,
	}
	if opts.ServerName == "" {
		opts.ServerName = "lash"
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
	go srv.Start()
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if !srv.ReadyForConnections(timeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("streams: embedded server not ready after %s", timeout)
	}
	return &Embedded{srv: srv}, nil
}

// Connect opens an in-process connection.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
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
