package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoDeployment: the streams of a deployment are not there.
var ErrNoDeployment = errors.New("streams: no lash deployment")

// Bind returns a client for an existing deployment, for tools that must
// not create one (an operator's CLI pointed at the wrong server or prefix
// would otherwise leave streams behind). It checks the streams as Ensure
// does, taking their replication as it finds it, and creates nothing.
func Bind(ctx context.Context, nc *nats.Conn, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(DefaultTimeout))
	if err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	if cfg, err = adopt(ctx, js, cfg); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, nc: nc, js: js, subj: Subjects{prefix: cfg.Prefix}}
	bind := func(want jetstream.StreamConfig) (jetstream.Stream, error) {
		st, err := js.Stream(ctx, want.Name)
		if err != nil {
			return nil, fmt.Errorf("streams: bind %s: %w", want.Name, err)
		}
		if err := compareStream(want, st.CachedInfo().Config); err != nil {
			return nil, err
		}
		return st, nil
	}
	for s := Stream(0); s < numStreams; s++ {
		st, err := bind(cfg.streamConfig(s))
		if addedLater(s) && errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // lost with a server's restart (LIVE, in memory), or newer than the deployment's nodes: bound when a node makes it
		}
		if err != nil {
			return nil, err
		}
		c.streams[s] = st
	}
	st, err := bind(cfg.leaseStreamConfig())
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, cfg.leaseBucket())
	if err != nil {
		return nil, fmt.Errorf("streams: bind bucket %s: %w", cfg.leaseBucket(), err)
	}
	c.leases, c.leaseStream = kv, st
	if _, err := bind(cfg.blobStreamConfig()); err != nil {
		return nil, err
	}
	if err := c.bindBlobs(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// adopt takes the deployment's settings as its streams have them: a reading
// tool works with whatever the nodes were started with.
func adopt(ctx context.Context, js jetstream.JetStream, cfg Config) (Config, error) {
	info := func(s Stream) (*jetstream.StreamConfig, error) {
		name := cfg.streamName(s)
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%w with prefix %q on this server: stream %s is missing", ErrNoDeployment, cfg.Prefix, name)
		}
		if err != nil {
			return nil, fmt.Errorf("streams: bind %s: %w", name, err)
		}
		return &st.CachedInfo().Config, nil
	}
	sess, err := info(Sessions)
	if err != nil {
		return cfg, err
	}
	fx, err := info(Effects)
	if err != nil {
		return cfg, err
	}
	cfg.Replicas, cfg.DuplicateWindow = sess.Replicas, sess.Duplicates
	cfg.MaxInputBytes, cfg.MaxMsgSize = sess.MaxMsgSize, fx.MaxMsgSize
	// LIVE may be missing (a memory stream after a server's restart): the
	// deployment's other streams say the rest, and it is bound when a
	// node makes it again.
	if live, err := info(Live); err == nil {
		cfg.LiveRetention, cfg.LiveMaxBytes, cfg.LiveFile = live.MaxAge, live.MaxBytes, live.Storage == jetstream.FileStorage
	} else if !errors.Is(err, ErrNoDeployment) {
		return cfg, err
	}
	if n, err := strconv.Atoi(sess.Metadata[metaInline]); err == nil {
		cfg.InlineBytes = n
	}
	if n, err := strconv.ParseInt(sess.Metadata[metaMaxPayload], 10, 64); err == nil {
		cfg.MaxPayloadBytes = n
	}
	return cfg, nil
}
