// Package trigtest is the conformance suite of the trigger store (package
// triggers): ids, subscription changes and their receipts, occurrences
// and their reservations, and delivery through a router, run against any
// JetStream a conformance.Env describes.
//
//	srv := testenv.RunJetStream(t)
//	trigtest.Run(t, conformance.Env{Name: "single", Replicas: 1, Conn: srv.Conn})
package trigtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/conformance"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/triggers"
)

const (
	subtestTimeout = 60 * time.Second
	racers         = 8
	// settle bounds waits for a router to read what was just stored.
	settle = 10 * time.Second
)

var subtests = []struct {
	name string
	fn   func(t *testing.T, env conformance.Env)
}{
	{"ids/stable", testStableIDs},
	{"register/idempotent-and-conflict", testRegister},
	{"update/compare-and-set", testUpdateCAS},
	{"disable/keeps-reserved-work", testDisableKeepsReserved},
	{"delete/tombstone-and-revive", testDeleteRevive},
	{"owner/scoping", testOwnerScoping},
	{"occurrence/atomic-and-idempotent", testOccurrenceOnce},
	{"receipts/survive-reopen", testReceiptsReopen},
	{"router/fan-out-once", testFanOutOnce},
	{"router/as-of-the-signal", testAsOfSignal},
	{"router/forgets-deleted-subscriptions", testForgetDeleted},
	{"router/sweep-finishes-reservations", testSweep},
	{"router/sweep-forgets-what-was-pruned", testSweepAfterPrune},
	{"router/agent-target", testAgentTarget},
	{"router/unstartable-delivery-marked", testUnstartable},
	{"prune/only-what-is-done", testPrune},
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

var host = triggers.Owner{Kind: triggers.Host}

func session(id string) triggers.Owner { return triggers.Owner{Kind: triggers.Session, ID: id} }

// spec matches pattern and starts the tool "handle".
func spec(typ, key string) *triggers.Spec {
	return &triggers.Spec{SourceType: typ, SourceKey: key,
		Start: triggers.Target{Kind: processes.ToolCall, Tool: "handle", Args: json.RawMessage(`{"mode": "fast"}`)}}
}

var opN atomic.Int64

func opID() string { return fmt.Sprintf("op-%d-%d", time.Now().UnixNano(), opN.Add(1)) }

func register(t *testing.T, ctx context.Context, tr *triggers.Triggers, o triggers.Owner, key string, s *triggers.Spec) *triggers.Receipt {
	t.Helper()
	r, err := tr.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActRegister, Owner: o, Key: key, Spec: s}, nil)
	if err != nil {
		t.Fatalf("register %s: %v", key, err)
	}
	return r
}

func act(ctx context.Context, tr *triggers.Triggers, action, sub string, rev uint64, scope *triggers.Owner) (*triggers.Receipt, error) {
	return tr.Apply(ctx, triggers.Op{ID: opID(), Action: action, Subscription: sub, Revision: rev}, scope)
}

// signal publishes a signal and returns it as stored.
func signal(t *testing.T, ctx context.Context, c *streams.Client, rest, msgID, payload string) *streams.Msg {
	t.Helper()
	subj := c.Config().Prefix + ".signal." + rest
	seq, _, err := c.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(payload), MsgID: msgID})
	if err != nil {
		t.Fatalf("publish %s: %v", subj, err)
	}
	m, err := c.NextOnSubject(ctx, subj, seq)
	if err != nil || m.Seq != seq {
		t.Fatalf("reading back %s at %d: %v", subj, seq, err)
	}
	return m
}

func history(t *testing.T, ctx context.Context, tr *triggers.Triggers, id string) []*triggers.Subscription {
	t.Helper()
	h, err := tr.History(ctx, id, nil)
	if err != nil {
		t.Fatalf("History(%s): %v", id, err)
	}
	return h
}

// router returns a router following c's deployment, running until the
// subtest ends.
func router(t *testing.T, c *streams.Client, writer string, cfg triggers.RouterConfig) (*triggers.Router, *processes.Registry) {
	t.Helper()
	procs := processes.New(c, writer)
	cfg.Triggers, cfg.Registry, cfg.Store = triggers.New(c, writer), procs, c
	r := triggers.NewRouter(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, procs
}

func processIDs(t *testing.T, ctx context.Context, procs *processes.Registry) []string {
	t.Helper()
	ps, bad, err := procs.List(ctx)
	if err != nil || len(bad) > 0 {
		t.Fatalf("List processes: %v %v", err, bad)
	}
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	return ids
}

func is(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}
