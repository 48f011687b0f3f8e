// Package proctest is the conformance suite of the process registry
// (package processes): the guarantees of its log, its fencing and its
// waits, run against any JetStream a conformance.Env describes.
//
//	srv := testenv.RunJetStream(t)
//	proctest.Run(t, conformance.Env{Name: "single", Replicas: 1, Conn: srv.Conn})
//
// Every subtest opens a deployment of its own. Racing writers use
// connections of their own, as separate nodes would.
package proctest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lash-run/lash/conformance"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
)

const (
	subtestTimeout = 60 * time.Second
	racers         = 8
	longTTL        = time.Minute
)

var subtests = []struct {
	name string
	fn   func(t *testing.T, env conformance.Env)
}{
	{"register/idempotent", testRegisterIdempotent},
	{"register/invalid", testRegisterInvalid},
	{"events/dense-and-declared", testDenseDeclared},
	{"events/keyed-terminal-and-cancel", testKeyed},
	{"events/one-terminal-among-racers", testOneTerminal},
	{"events/unknown-process", testUnknown},
	{"attempt/fencing", testFencing},
	{"attempt/owner-bound-starts-once", testOwnerBoundOnce},
	{"abandon/writer-and-evidence", testAbandon},
	{"await/ended", testAwaitEnded},
	{"await/racing-terminal", testAwaitRacing},
	{"grants/transfer-and-revoke", testGrants},
	{"prune/ended-only", testPrune},
	{"tree/budget", testTreeBudget},
	{"worker/runs-once", testWorkersRunOnce},
	{"worker/cancel", testWorkerCancel},
	{"worker/drain", testDrain},
	{"recovery/verdicts", testRecoveryVerdicts},
	{"recovery/gives-up", testGivesUp},
	{"recovery/own-stopped-attempts", testOwnStopped},
	{"worker/waiters-apart", testWaitersApart},
	{"worker/watch-runners", testWatchRunners},
}

// Run runs the suite against env.
func Run(t *testing.T, env conformance.Env) {
	t.Helper()
	env = conformance.Prepare(t, env)
	for _, st := range subtests {
		t.Run(st.name, func(t *testing.T) { st.fn(t, env) })
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), subtestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// tool is a rerunnable background tool call started by a host.
func tool(args string) processes.Registration {
	return processes.Registration{
		Input:       processes.Input{Kind: processes.ToolCall, Tool: "build", Args: json.RawMessage(args)},
		Disposition: processes.Rerunnable,
		EventTypes:  []string{"progress"},
		Provenance:  processes.Provenance{Host: "node-a"},
	}
}

// external is work owned outside lash.
func external(ref string) processes.Registration {
	return processes.Registration{
		Input:       processes.Input{Kind: processes.External, ExternalRef: ref},
		Disposition: processes.ExternallyOwned,
		Provenance:  processes.Provenance{Session: "s1", Turn: "t1", Effect: 3, Call: "call_1"},
		WakeTarget:  "s1",
	}
}

func register(t *testing.T, ctx context.Context, r *processes.Registry, id string, reg processes.Registration) *processes.Process {
	t.Helper()
	p, created, err := r.Register(ctx, id, reg)
	if err != nil || !created {
		t.Fatalf("Register(%s) = created %v, %v; want a new process", id, created, err)
	}
	return p
}

// holder is a node with a lease manager whose liveness key is live.
func holder(t *testing.T, ctx context.Context, c *streams.Client, id string) *leases.Manager {
	t.Helper()
	m := leases.New(c, leases.LocalOwner(id))
	if err := m.Beat(ctx, longTTL); err != nil {
		t.Fatalf("Beat(%s): %v", id, err)
	}
	return m
}

// events returns the types of the process's events, in order, and checks
// that they are numbered 1, 2, 3...
func events(t *testing.T, ctx context.Context, r *processes.Registry, id string) []string {
	t.Helper()
	evs, err := r.Events(ctx, id, 0)
	if err != nil {
		t.Fatalf("Events(%s): %v", id, err)
	}
	var types []string
	for i, e := range evs {
		if e.N != uint64(i+1) {
			t.Fatalf("event %d of %s is numbered %d", i+1, id, e.N)
		}
		types = append(types, e.Type)
	}
	return types
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
