package testenv

import "github.com/nats-io/nats-server/v2/server"

// An Option changes how RunJetStream and RunCluster configure their servers.
type Option func(*config)

type config struct {
	name       string
	syncAlways bool
	changes    []func(*server.Options)
}

// apply runs the WithOptions changes on o, in the order they were given.
func (c config) apply(o *server.Options) *server.Options {
	for _, change := range c.changes {
		change(o)
	}
	return o
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

// WithOptions changes the nats-server options of every server, after
// testenv has set its own and before each start (a restart too). The
// change must leave what testenv promises in place (JetStream, the store
// directory, the listeners and, in a cluster, the routes); the rest is the
// test's: authentication, limits, accounts.
//
// Server.Conn connects with the Username and Password, or the
// Authorization token, the options name. Other programs need them given.
func WithOptions(change func(*server.Options)) Option {
	return func(c *config) { c.changes = append(c.changes, change) }
}

// WithLimits raises (or lowers) the longest protocol line and the largest
// message payload every server accepts: nats-server's MaxControlLine
// (default 4 KiB, which bounds a subject's length) and MaxPayload (default
// 1 MiB; the server warns above 8 MiB and refuses more than its
// MaxPending, 64 MiB). Zero keeps a default. Clients learn MaxPayload from
// the server; a publish above it fails in the client, a longer line than
// MaxControlLine closes the connection for good.
func WithLimits(maxControlLine, maxPayload int32) Option {
	return WithOptions(func(o *server.Options) {
		if maxControlLine != 0 {
			o.MaxControlLine = maxControlLine
		}
		if maxPayload != 0 {
			o.MaxPayload = maxPayload
		}
	})
}
