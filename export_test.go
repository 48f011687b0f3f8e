package lash

// withBoundary stops the driver at named points, as a crash would.
func withBoundary(f func(string) error) Option { return func(o *options) { o.boundary = f } }
