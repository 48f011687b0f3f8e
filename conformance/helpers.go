package conformance

import (
	"testing"

	"github.com/lash-run/lash/streams"
)

// The helpers below let the conformance suites of other planes (package
// processes has one) run on the same environments with the same
// deployment hygiene.

// Prepare checks env, fills in its defaults and keeps the account's store
// directory alive while the caller's subtests create and delete
// deployments (see anchor).
func Prepare(t *testing.T, env Env) Env {
	t.Helper()
	if env.Conn == nil {
		t.Fatalf("conformance: env %q has no Conn", env.Name)
	}
	if env.Replicas == 0 {
		env.Replicas = 1
	}
	anchor(t, env)
	return env
}

// Deployment is a deployment of its own for one subtest, deleted when the
// subtest ends.
type Deployment struct{ d *deployment }

// Open creates a deployment with a new prefix on env.
func Open(t *testing.T, env Env) *Deployment {
	t.Helper()
	return &Deployment{open(t, env, streams.Config{})}
}

// Client is the deployment's first client.
func (d *Deployment) Client() *streams.Client { return d.d.client }

// Reopen opens another client of the deployment on a new connection: a
// second node, sharing nothing with the first but the server.
func (d *Deployment) Reopen(t *testing.T) *streams.Client { t.Helper(); return d.d.reopen(t) }

// Race runs fn(0..n-1) in n goroutines released at the same moment and
// returns their results by index.
func Race[T any](n int, fn func(i int) T) []T { return race(n, fn) }
