package lash

import "github.com/lash-run/lash/triggers"

// withBoundary stops the driver at named points, as a crash would.
func withBoundary(f func(string) error) Option { return func(o *options) { o.boundary = f } }

func withRouter(f func(*triggers.RouterConfig)) Option { return func(o *options) { o.router = f } }
