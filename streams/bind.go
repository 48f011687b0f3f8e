package streams

import (
	"context"
	"errors"
	"fmt"

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
	c := &Client{cfg: cfg, nc: nc, js: js, subj: Subjects{prefix: cfg.Prefix}}
	bind := func(want jetstream.StreamConfig) (jetstream.Stream, error) {
		st, err := js.Stream(ctx, want.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%w with prefix %q on this server: stream %s is missing", ErrNoDeployment, cfg.Prefix, want.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("streams: bind %s: %w", want.Name, err)
		}
		got := st.CachedInfo().Config
		want.Replicas = got.Replicas
		if err := compareStream(want, got); err != nil {
			return nil, err
		}
		return st, nil
	}
	for s := Stream(0); s < numStreams; s++ {
		st, err := bind(cfg.streamConfig(s))
		if err != nil {
			return nil, err
		}
		if s == 0 {
			c.cfg.Replicas = st.CachedInfo().Config.Replicas
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
	return c, nil
}
