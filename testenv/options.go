package testenv

// An Option changes how RunJetStream and RunCluster configure their servers.
type Option func(*config)

type config struct {
	name       string
	syncAlways bool
}

func newConfig(opts []Option) config {
	c := config{name: "lash"}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithSyncAlways makes every server fsync each JetStream write before it
// acknowledges it (the nats-server SyncAlways option). Without it, writes are
// acknowledged before fsync, and the sync interval defaults to two minutes.
func WithSyncAlways() Option {
	return func(c *config) { c.syncAlways = true }
}

// WithServerName names the server of RunJetStream; for RunCluster it is the
// prefix of the server names, which are name-0, name-1, and so on. The
// default is "lash". A name may not contain spaces.
func WithServerName(name string) Option {
	return func(c *config) { c.name = name }
}
