package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultTimeout bounds calls whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Client is the one handle lash has on JetStream: the deployment's streams
// and buckets, its subject names, and the write primitives built on them.
type Client struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	// mu guards streams: a missing LIVE stream (Bind) is bound when it
	// comes back.
	mu      sync.Mutex
	streams [numStreams]jetstream.Stream
	leases  jetstream.KeyValue
	// leaseStream is the bucket's stream, for reads the KV API lacks.
	leaseStream jetstream.Stream
	blobs       jetstream.ObjectStore
	blobStream  jetstream.Stream
	subj        Subjects
	// signer, once Sign ran, signs and checks records.
	signer atomic.Pointer[signKey]
	refuse atomic.Pointer[error]
	// replies takes the answers of batched direct gets.
	replies replyMux
}

// Open returns a client for the deployment described by cfg and runs
// Ensure: missing streams are created, existing ones are checked.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(DefaultTimeout))
	if err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	c := &Client{cfg: cfg, nc: nc, js: js, subj: Subjects{prefix: cfg.Prefix}}
	if err := c.Ensure(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Config is the client's configuration with defaults applied.
func (c *Client) Config() Config { return c.cfg }

// Subjects names the deployment's subjects.
func (c *Client) Subjects() Subjects { return c.subj }

// Conn is the underlying connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// StreamName is the JetStream name of one of the deployment's streams.
func (c *Client) StreamName(s Stream) string { return c.cfg.streamName(s) }

// LeaseBucket is the name of the lease bucket.
func (c *Client) LeaseBucket() string { return c.cfg.leaseBucket() }

// ErrStreamMissing: a stream of the deployment is not on the server. Only
// LIVE is expected to go missing: it is kept in memory, so a server that
// restarts loses it until a node makes it again (EnsureLive).
var ErrStreamMissing = errors.New("streams: stream missing")

// stream is the handle of stream s, bound now if it was missing when the
// client was made.
func (c *Client) stream(ctx context.Context, s Stream) (jetstream.Stream, error) {
	c.mu.Lock()
	st := c.streams[s]
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	name := c.cfg.streamName(s)
	st, err := c.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: %s is not on the server (a node makes it: LIVE, kept in memory, within seconds of a server's restart; a stream newer than the deployment's nodes when a node of this version starts)", ErrStreamMissing, name)
	}
	if err != nil {
		return nil, fmt.Errorf("streams: bind %s: %w", name, err)
	}
	c.mu.Lock()
	c.streams[s] = st
	c.mu.Unlock()
	return st, nil
}

// streamIndex names the stream of the deployment that captures subject.
func (c *Client) streamIndex(subject string) (Stream, bool) {
	rest, ok := strings.CutPrefix(subject, c.cfg.Prefix+".")
	if !ok {
		return 0, false
	}
	kind, _, _ := strings.Cut(rest, ".")
	switch kind {
	case "sess":
		return Sessions, true
	case "fx":
		return Effects, true
	case "proc":
		return Processes, true
	case "signal", "trig":
		return Triggers, true
	case "timer":
		return Timers, true
	case "live":
		return Live, true
	case "agent":
		return Agents, true
	}
	return 0, false
}

// streamOf maps a subject to the stream that captures it.
func (c *Client) streamOf(subject string) (jetstream.Stream, error) {
	if s, ok := c.streamIndex(subject); ok {
		return c.stream(context.Background(), s)
	}
	if strings.HasPrefix(subject, "$O."+c.cfg.blobBucket()+".") {
		return c.blobStream, nil
	}
	return nil, fmt.Errorf("streams: subject %q belongs to no stream of deployment %q", subject, c.cfg.Prefix)
}

// withTimeout gives ctx the default deadline if it has none.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// apiCode returns the JetStream error code in err, or 0.
func apiCode(err error) jetstream.ErrorCode {
	if err == nil {
		return 0 // most calls: no error to look into, nothing allocated
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}
