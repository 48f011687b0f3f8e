package trigtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/conformance"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/triggers"
)

// Ids depend on what they name only: two nodes derive the same ones.
func testStableIDs(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	a, b := triggers.New(d.Client(), "node-a"), triggers.New(d.Reopen(t), "node-b")
	ra := register(t, ctx, a, host, "deploys", spec("deploy", ">"))
	rb, err := b.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActRegister, Owner: host, Key: "deploys", Spec: spec("deploy", ">")}, nil)
	if err != nil || rb.Subscription != ra.Subscription || rb.Changed {
		t.Fatalf("second node's register = %+v, %v; want %s unchanged", rb, err, ra.Subscription)
	}
	if got := triggers.SubscriptionID(host, "deploys"); got != ra.Subscription {
		t.Fatalf("SubscriptionID = %s, register made %s", got, ra.Subscription)
	}
	if triggers.SubscriptionID(session("s1"), "deploys") == ra.Subscription {
		t.Fatal("a session's subscription under the host's key has the host's id")
	}
	o1 := triggers.OccurrenceID("deploy", "42", "m-1")
	if o1 != triggers.OccurrenceID("deploy", "42", "m-1") || o1 == triggers.OccurrenceID("deploy", "42", "m-2") ||
		o1 == triggers.OccurrenceID("deploy", "42.m-1", "") {
		t.Fatal("occurrence ids are not a function of (type, key, idempotency key)")
	}
	d1 := triggers.DeliveryID(o1, ra.Subscription, 1, 1)
	if d1 == triggers.DeliveryID(o1, ra.Subscription, 2, 1) || d1 == triggers.DeliveryID(o1, ra.Subscription, 1, 2) {
		t.Fatal("delivery ids ignore the subscription's incarnation or revision")
	}
}

// Register is idempotent by owner and key; another definition is a
// conflict and writes nothing.
func testRegister(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	tr := triggers.New(conformance.Open(t, env).Client(), "node-a")
	op := triggers.Op{ID: "op-1", Action: triggers.ActRegister, Owner: host, Key: "k", Spec: spec("deploy", "*")}
	r1, err := tr.Apply(ctx, op, nil)
	if err != nil || !r1.Changed || r1.Revision != 1 || r1.Incarnation != 1 {
		t.Fatalf("register = %+v, %v", r1, err)
	}
	r2, err := tr.Apply(ctx, op, nil)
	if err != nil || *r2 != *r1 {
		t.Fatalf("the same operation again = %+v, %v; want its receipt %+v", r2, err, r1)
	}
	r3 := register(t, ctx, tr, host, "k", spec("deploy", "*"))
	if r3.Changed || r3.Revision != 1 {
		t.Fatalf("the same registration under another op = %+v; want unchanged at revision 1", r3)
	}
	_, err = tr.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActRegister, Owner: host, Key: "k", Spec: spec("deploy", "42")}, nil)
	is(t, err, triggers.ErrConflict, "register with another definition")
	_, err = tr.Apply(ctx, triggers.Op{ID: "op-1", Action: triggers.ActDisable, Subscription: r1.Subscription}, nil)
	is(t, err, triggers.ErrConflict, "another operation under a used id")
	bad := spec("deploy", "a.>.b")
	_, err = tr.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActRegister, Owner: host, Key: "bad", Spec: bad}, nil)
	is(t, err, triggers.ErrInvalid, "a '>' before the last token")
	if h := history(t, ctx, tr, r1.Subscription); len(h) != 1 || h[0].Spec.SourceKey != "*" {
		t.Fatalf("history after refused changes = %d states", len(h))
	}
	if _, err := tr.Get(ctx, triggers.SubscriptionID(host, "bad"), nil); !errors.Is(err, triggers.ErrNotFound) {
		t.Fatalf("an invalid registration left a subscription: %v", err)
	}
}

// Update names the revision it changes; of racing updates at one
// revision, one wins.
func testUpdateCAS(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	tr := triggers.New(d.Client(), "node-a")
	r := register(t, ctx, tr, host, "k", spec("deploy", "*"))
	up := func(tr *triggers.Triggers, rev uint64, key string) (*triggers.Receipt, error) {
		return tr.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActUpdate, Subscription: r.Subscription, Revision: rev, Spec: spec("deploy", key)}, nil)
	}
	_, err := up(tr, 0, "x")
	is(t, err, triggers.ErrInvalid, "update without a revision")
	_, err = up(tr, 7, "x")
	is(t, err, triggers.ErrStale, "update at a revision it is not at")
	clients := make([]*triggers.Triggers, racers)
	for i := range clients {
		clients[i] = triggers.New(d.Reopen(t), "racer")
	}
	errs := conformance.Race(racers, func(i int) error { _, err := up(clients[i], 1, string(rune('a'+i))); return err })
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, triggers.ErrStale):
			t.Fatalf("a racing update failed otherwise: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d racing updates at revision 1 won, want 1", won)
	}
	h := history(t, ctx, tr, r.Subscription)
	if len(h) != 2 || h[1].Revision != 2 || h[1].Action != triggers.ActUpdate {
		t.Fatalf("history = %d states, want 2 (register, one update)", len(h))
	}
}

// Disabling a subscription stops new deliveries, not reserved ones.
func testDisableKeepsReserved(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	c := conformance.Open(t, env).Client()
	tr := triggers.New(c, "node-a")
	r := register(t, ctx, tr, host, "k", spec("deploy", ">"))
	sub, _ := tr.Get(ctx, r.Subscription, nil)
	occ := triggers.Occurrence{ID: triggers.OccurrenceID("deploy", "1", "m1"), SourceType: "deploy", SourceKey: "1", IdempotencyKey: "m1",
		Subject: "x.signal.deploy.1", Payload: json.RawMessage(`{}`)}
	_, ds, created, err := tr.Record(ctx, occ, []*triggers.Subscription{sub})
	if err != nil || !created || len(ds) != 1 {
		t.Fatalf("Record = %d deliveries, created %v, %v", len(ds), created, err)
	}
	if _, err := act(ctx, tr, triggers.ActDisable, r.Subscription, 1, nil); err != nil {
		t.Fatal(err)
	}
	procs := processes.New(c, "node-a")
	if err := tr.Start(ctx, procs, ds[0]); err != nil {
		t.Fatalf("starting a delivery reserved before the disable: %v", err)
	}
	if p, err := procs.Get(ctx, ds[0].Process); err != nil || p.Registration.Input.Tool != "handle" {
		t.Fatalf("process of the delivery: %v", err)
	}
	if got, _ := tr.Delivery(ctx, ds[0].ID); got == nil || !got.Started {
		t.Fatal("the delivery is not marked started")
	}
	disabled, _ := tr.Get(ctx, r.Subscription, nil)
	occ2 := occ
	occ2.ID, occ2.IdempotencyKey = triggers.OccurrenceID("deploy", "1", "m2"), "m2"
	if _, ds, _, err := tr.Record(ctx, occ2, []*triggers.Subscription{disabled}); err != nil || len(ds) != 0 {
		t.Fatalf("an occurrence after the disable got %d deliveries, %v", len(ds), err)
	}
}

// Delete leaves a tombstone and the history; revive starts a new
// incarnation, whose deliveries are new.
func testDeleteRevive(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	tr := triggers.New(conformance.Open(t, env).Client(), "node-a")
	r := register(t, ctx, tr, host, "k", spec("deploy", ">"))
	del, err := act(ctx, tr, triggers.ActDelete, r.Subscription, 0, nil)
	if err != nil || !del.Changed {
		t.Fatalf("delete = %+v, %v", del, err)
	}
	s, err := tr.Get(ctx, r.Subscription, nil)
	if err != nil || !s.Deleted || s.Live() {
		t.Fatalf("after delete: %+v, %v; want a tombstone", s, err)
	}
	_, err = tr.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActRegister, Owner: host, Key: "k", Spec: spec("deploy", ">")}, nil)
	is(t, err, triggers.ErrDeleted, "register over a tombstone")
	_, err = act(ctx, tr, triggers.ActEnable, r.Subscription, 0, nil)
	is(t, err, triggers.ErrDeleted, "enable a deleted subscription")
	rv, err := act(ctx, tr, triggers.ActRevive, r.Subscription, 0, nil)
	if err != nil || rv.Incarnation != 2 || rv.Revision != 3 {
		t.Fatalf("revive = %+v, %v; want incarnation 2 at revision 3", rv, err)
	}
	h := history(t, ctx, tr, r.Subscription)
	if len(h) != 3 || !h[1].Deleted || h[2].Deleted || !h[2].Enabled {
		t.Fatalf("history = %d states; want registered, deleted, revived", len(h))
	}
	occ := "occ-x"
	if triggers.DeliveryID(occ, r.Subscription, h[0].Incarnation, h[0].Revision) == triggers.DeliveryID(occ, r.Subscription, h[2].Incarnation, h[2].Revision) {
		t.Fatal("a revived subscription would take the deliveries of its first incarnation")
	}
}

// A session sees and changes only its own subscriptions; an operator
// sees all.
func testOwnerScoping(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	tr := triggers.New(conformance.Open(t, env).Client(), "node-a")
	s1, s2 := session("s1"), session("s2")
	r, err := tr.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActRegister, Owner: s1, Key: "mine", Spec: spec("mail", ">")}, &s1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActRegister, Owner: s1, Key: "theirs", Spec: spec("mail", ">")}, &s2)
	is(t, err, triggers.ErrInvalid, "registering for another owner")
	_, err = tr.Get(ctx, r.Subscription, &s2)
	is(t, err, triggers.ErrNotFound, "another session's Get")
	_, err = act(ctx, tr, triggers.ActDisable, r.Subscription, 0, &s2)
	is(t, err, triggers.ErrNotFound, "another session's disable")
	if _, err := act(ctx, tr, triggers.ActDisable, r.Subscription, 0, &s1); err != nil {
		t.Fatalf("the owner's disable: %v", err)
	}
	register(t, ctx, tr, host, "ops", spec("deploy", ">"))
	for _, c := range []struct {
		scope *triggers.Owner
		want  int
	}{{&s1, 1}, {&s2, 0}, {&host, 1}, {nil, 2}} {
		list, bad, err := tr.List(ctx, c.scope)
		if err != nil || len(bad) != 0 || len(list) != c.want {
			t.Fatalf("List(%v) = %d subscriptions, %v %v; want %d", c.scope, len(list), bad, err, c.want)
		}
	}
}

// An occurrence and its reservations are stored together, once: racing
// recorders all get the first recording.
func testOccurrenceOnce(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	tr := triggers.New(d.Client(), "node-a")
	var subs []*triggers.Subscription
	for _, k := range []string{"a", "b", "c"} {
		r := register(t, ctx, tr, host, k, spec("deploy", ">"))
		s, _ := tr.Get(ctx, r.Subscription, nil)
		subs = append(subs, s)
	}
	occ := triggers.Occurrence{ID: triggers.OccurrenceID("deploy", "7", "m"), SourceType: "deploy", SourceKey: "7", IdempotencyKey: "m",
		Subject: "x.signal.deploy.7", Payload: json.RawMessage(`{"n":7}`)}
	recorders := make([]*triggers.Triggers, racers)
	for i := range recorders {
		recorders[i] = triggers.New(d.Reopen(t), "racer")
	}
	type result struct {
		ids     []string
		created bool
		err     error
	}
	res := conformance.Race(racers, func(i int) result {
		// Some racers know fewer subscriptions: only the first recording counts.
		_, ds, created, err := recorders[i].Record(ctx, occ, subs[:1+i%3])
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.ID)
		}
		return result{ids, created, err}
	})
	created := 0
	var first []string
	for _, r := range res {
		if r.err != nil {
			t.Fatalf("Record: %v", r.err)
		}
		if r.created {
			created++
			first = r.ids
		}
	}
	if created != 1 {
		t.Fatalf("%d recorders created the occurrence, want 1", created)
	}
	for _, r := range res {
		if !slices.Equal(r.ids, first) {
			t.Fatalf("a recorder got deliveries %v, the first recording made %v", r.ids, first)
		}
	}
	all, err := tr.Deliveries(ctx)
	if err != nil || len(all) != len(first) {
		t.Fatalf("%d deliveries stored, %v; want %d", len(all), err, len(first))
	}
	o, err := tr.Occurrence(ctx, occ.ID)
	if err != nil || !slices.Equal(o.Deliveries, first) {
		t.Fatalf("occurrence lists %v, %v", o, err)
	}
}

// Receipts are on the stream: another client after a reopen replays them.
func testReceiptsReopen(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	op := triggers.Op{ID: "op-reopen", Action: triggers.ActRegister, Owner: host, Key: "k", Spec: spec("deploy", ">")}
	r1, err := triggers.New(d.Client(), "node-a").Apply(ctx, op, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := triggers.New(d.Reopen(t), "node-b")
	if _, err := act(ctx, other, triggers.ActDisable, r1.Subscription, 0, nil); err != nil {
		t.Fatal(err)
	}
	r2, err := other.Apply(ctx, op, nil)
	if err != nil || *r2 != *r1 {
		t.Fatalf("replayed receipt = %+v, %v; want %+v", r2, err, r1)
	}
	op.Spec = spec("deploy", "42")
	_, err = other.Apply(ctx, op, nil)
	is(t, err, triggers.ErrConflict, "another operation under a receipted id")
}

// One signal matching three subscriptions starts three processes, however
// often it is delivered or published.
func testFanOutOnce(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	c := d.Client()
	tr := triggers.New(c, "op")
	for _, s := range []struct{ key, typ, pat string }{{"all", "deploy", ">"}, {"one", "deploy", "42.*"}, {"any", "*", "42.done"}, {"other", "deploy", "43.*"}} {
		register(t, ctx, tr, host, s.key, spec(s.typ, s.pat))
	}
	routers := []*triggers.Router{}
	var procs *processes.Registry
	for i := range 2 {
		r, p := router(t, d.Reopen(t), []string{"node-a", "node-b"}[i], triggers.RouterConfig{})
		routers, procs = append(routers, r), p
	}
	m := signal(t, ctx, c, "deploy.42.done", "sig-1", `{"ok":true}`)
	again := signal(t, ctx, c, "deploy.42.done", "sig-1", `{"ok":true}`) // deduped: the same message
	if again.Seq != m.Seq {
		t.Fatalf("a republish within the window was stored anew at %d", again.Seq)
	}
	for _, r := range []*triggers.Router{routers[0], routers[1], routers[0]} {
		o, ds, err := r.Deliver(ctx, m)
		if err != nil || len(ds) != 3 || len(o.Deliveries) != 3 {
			t.Fatalf("Deliver = %d deliveries, %v; want 3", len(ds), err)
		}
	}
	// After the dedupe window a republish is a new message, and the same
	// occurrence.
	late := signal(t, ctx, c, "deploy.42.done", "", `{"ok":true}`)
	late.Header = m.Header
	if _, _, err := routers[1].Deliver(ctx, late); err != nil {
		t.Fatal(err)
	}
	ids := processIDs(t, ctx, procs)
	if len(ids) != 3 {
		t.Fatalf("processes = %v; want 3", ids)
	}
	for _, id := range ids {
		p, err := procs.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var args struct {
			Mode  string         `json:"mode"`
			Event triggers.Event `json:"event"`
		}
		if err := json.Unmarshal(p.Registration.Input.Args, &args); err != nil || args.Mode != "fast" || string(args.Event.Payload) != `{"ok":true}` {
			t.Fatalf("process %s args = %s, %v", id, p.Registration.Input.Args, err)
		}
	}
	occs, err := tr.Occurrences(ctx, 0, 0)
	if err != nil || len(occs) != 1 {
		t.Fatalf("occurrences = %d, %v; want 1", len(occs), err)
	}
}

// A signal is matched against subscriptions as they stood when it was
// stored, whenever it is delivered.
func testAsOfSignal(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	c := d.Client()
	tr := triggers.New(c, "op")
	early := register(t, ctx, tr, host, "early", spec("deploy", ">"))
	gone := register(t, ctx, tr, host, "disabled-later", spec("deploy", ">"))
	m := signal(t, ctx, c, "deploy.1", "", `{}`)
	register(t, ctx, tr, host, "late", spec("deploy", ">"))
	if _, err := act(ctx, tr, triggers.ActDisable, gone.Subscription, 0, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := router(t, d.Reopen(t), "node-a", triggers.RouterConfig{})
	_, ds, err := r.Deliver(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	for _, d := range ds {
		subs = append(subs, d.Subscription)
	}
	slices.Sort(subs)
	want := []string{early.Subscription, gone.Subscription}
	slices.Sort(want)
	if !slices.Equal(subs, want) {
		t.Fatalf("delivered to %v; want the two live when the signal was stored %v", subs, want)
	}
}

// A reservation whose process was never registered (its node died in
// between) is started by a sweep, once.
func testSweep(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	c := d.Client()
	tr := triggers.New(c, "op")
	m := reserveDying(t, ctx, d, tr)
	procs := processes.New(c, "check")
	if ids := processIDs(t, ctx, procs); len(ids) != 0 {
		t.Fatalf("processes before the sweep: %v", ids)
	}
	live, _ := router(t, d.Reopen(t), "node-live", triggers.RouterConfig{SweepAfter: time.Millisecond, SweepEvery: time.Hour})
	testenv.WaitFor(t, settle, func() error {
		if n := len(live.Open()); n != 3 {
			return errors.New("the router has not read the three reservations")
		}
		return nil
	})
	if n := live.Sweep(ctx); n != 3 {
		t.Fatalf("sweep started %d deliveries, want 3", n)
	}
	testenv.WaitFor(t, settle, func() error {
		if n := len(live.Open()); n != 0 {
			return errors.New("started marks not read yet")
		}
		return nil
	})
	if n := live.Sweep(ctx); n != 0 {
		t.Fatalf("a second sweep started %d deliveries", n)
	}
	if ids := processIDs(t, ctx, procs); len(ids) != 3 {
		t.Fatalf("processes after the sweep: %v; want 3", ids)
	}
	// The signal delivered again (JetStream redelivery) starts nothing more.
	if _, ds, err := live.Deliver(ctx, m); err != nil || len(ds) != 3 {
		t.Fatalf("redelivery: %d, %v", len(ds), err)
	}
	if ids := processIDs(t, ctx, procs); len(ids) != 3 {
		t.Fatalf("processes after redelivery: %v; want 3", ids)
	}
}

var errDied = errors.New("node died")

// reserveDying registers three subscriptions to deploy signals and has a
// router that dies right after reserving deliver one: three reservations
// whose processes were never registered. It returns the signal.
func reserveDying(t *testing.T, ctx context.Context, d *conformance.Deployment, tr *triggers.Triggers) *streams.Msg {
	t.Helper()
	for _, k := range []string{"a", "b", "c"} {
		register(t, ctx, tr, host, k, spec("deploy", ">"))
	}
	m := signal(t, ctx, d.Client(), "deploy.9", "sig-9", `{}`)
	dead, _ := router(t, d.Reopen(t), "node-dead", triggers.RouterConfig{
		AfterReserve: func(*triggers.Occurrence) { panic(errDied) }})
	func() {
		defer func() {
			if r := recover(); r != errDied {
				t.Fatalf("the dying router did not stop after reserving: %v", r)
			}
		}()
		_, _, _ = dead.Deliver(ctx, m)
	}()
	return m
}

// A router forgets a deleted subscription's history once the deletion is
// older than the retention, as a sweep prunes it from the stream: until
// then a signal stored before the deletion is delivered to it; after, the
// router knows what one started after the prune does.
func testForgetDeleted(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	c := d.Client()
	tr := triggers.New(c, "op")
	sub := register(t, ctx, tr, host, "short-lived", spec("deploy", ">"))
	before := signal(t, ctx, c, "deploy.1", "", `{}`)
	again := signal(t, ctx, c, "deploy.2", "", `{}`)
	if _, err := act(ctx, tr, triggers.ActDelete, sub.Subscription, 0, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := router(t, d.Reopen(t), "node-a", triggers.RouterConfig{Forget: time.Hour, SweepEvery: time.Hour})
	r.Sweep(ctx)
	if _, ds, err := r.Deliver(ctx, before); err != nil || len(ds) != 1 || ds[0].Subscription != sub.Subscription {
		t.Fatalf("a signal stored before the deletion: %d deliveries, %v; want one to the subscription", len(ds), err)
	}
	// A signal after the deletion: its delivery reads the deletion first.
	after := signal(t, ctx, c, "deploy.3", "", `{}`)
	if _, ds, err := r.Deliver(ctx, after); err != nil || len(ds) != 0 {
		t.Fatalf("a signal stored after the deletion: %d deliveries, %v; want none", len(ds), err)
	}
	r.SetForget(time.Nanosecond)
	r.Sweep(ctx)
	if _, ds, err := r.Deliver(ctx, again); err != nil || len(ds) != 0 {
		t.Fatalf("past the retention: %d deliveries, %v; want none", len(ds), err)
	}
}

// heldTail holds a router's reader at sequence hold until released, as a
// reader a burst left behind is.
type heldTail struct {
	*streams.Client
	hold    uint64
	release chan struct{}
}

func (s heldTail) Tail(ctx context.Context, st streams.Stream, filters []string, from uint64, fn func(*streams.Msg, uint64) error) error {
	return s.Client.Tail(ctx, st, filters, from, func(m *streams.Msg, pending uint64) error {
		if m.Seq > s.hold {
			select {
			case <-s.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return fn(m, pending)
	})
}

// A router whose reader is behind holds reservations whose start marks it
// has not read; if their deliveries and processes were pruned meanwhile,
// its sweep must not register the processes again (their work would run
// a second time), and forgets the reservations.
func testSweepAfterPrune(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	c := d.Client()
	tr := triggers.New(c, "op")
	reserveDying(t, ctx, d, tr)
	hold, err := c.LastSeq(ctx, streams.Triggers)
	if err != nil {
		t.Fatal(err)
	}
	lc := d.Reopen(t)
	held := heldTail{Client: lc, hold: hold, release: make(chan struct{})}
	defer close(held.release)
	live := triggers.NewRouter(triggers.RouterConfig{Triggers: triggers.New(lc, "node-live"), Registry: processes.New(lc, "node-live"),
		Store: held, SweepAfter: time.Millisecond, SweepEvery: time.Hour})
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = live.Run(rctx) }()
	defer func() { stop(); <-done }()
	testenv.WaitFor(t, settle, func() error {
		if n := len(live.Open()); n != 3 {
			return fmt.Errorf("the router read %d of the three reservations", n)
		}
		return nil
	})
	// Another node starts the deliveries; their processes end and are
	// pruned, then the deliveries: all past the held reader.
	procs := processes.New(c, "other")
	ds, err := tr.Deliveries(ctx)
	if err != nil || len(ds) != 3 {
		t.Fatalf("deliveries: %d, %v", len(ds), err)
	}
	for _, dl := range ds {
		if err := tr.Start(ctx, procs, dl); err != nil {
			t.Fatal(err)
		}
		subj, err := c.Subjects().ProcessEvents(dl.Process)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Purge(ctx, subj); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := tr.Prune(ctx, time.Now().Add(time.Hour), func(string) bool { return false }); err != nil || p.Deliveries != 3 {
		t.Fatalf("prune = %+v, %v; want the three deliveries", p, err)
	}
	if n := live.Sweep(ctx); n != 0 {
		t.Fatalf("the sweep started %d pruned deliveries again", n)
	}
	if ids := processIDs(t, ctx, procs); len(ids) != 0 {
		t.Fatalf("processes registered again after their prune: %v", ids)
	}
	if open := live.Open(); len(open) != 0 {
		t.Fatalf("the router still holds pruned reservations: %v", open)
	}
}

// A sub-agent target starts a session_turn process in a session of its
// own per delivery, with the event after the instructions.
func testAgentTarget(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	c := d.Client()
	tr := triggers.New(c, "op")
	s1 := session("s1")
	agent := &triggers.Spec{SourceType: "mail", SourceKey: ">", WakeTarget: "s1",
		Start: triggers.Target{Kind: processes.SessionTurn, Instructions: "Sort this mail.", Tools: []string{}}}
	if _, err := tr.Apply(ctx, triggers.Op{ID: opID(), Action: triggers.ActRegister, Owner: s1, Key: "inbox", Spec: agent}, &s1); err != nil {
		t.Fatal(err)
	}
	r, procs := router(t, d.Reopen(t), "node-a", triggers.RouterConfig{})
	for i, id := range []string{"m1", "m2"} {
		m := signal(t, ctx, c, "mail.alice", id, `{"subject":"hi"}`)
		_, ds, err := r.Deliver(ctx, m)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Deliver %d: %d deliveries, %v", i, len(ds), err)
		}
		p, err := procs.Get(ctx, ds[0].Process)
		if err != nil {
			t.Fatal(err)
		}
		in := p.Registration.Input
		if in.Kind != processes.SessionTurn || !strings.HasPrefix(in.Instructions, "Sort this mail.") || !strings.Contains(in.Instructions, `{"subject":"hi"}`) ||
			p.Registration.Provenance.Session != "s1" || !p.Granted("s1") || in.Tools == nil || len(in.Tools) != 0 {
			t.Fatalf("process %+v", p.Registration)
		}
	}
	ids := processIDs(t, ctx, procs)
	if len(ids) != 2 {
		t.Fatalf("processes %v", ids)
	}
	a, _ := procs.Get(ctx, ids[0])
	b, _ := procs.Get(ctx, ids[1])
	if a.Registration.Input.Session == b.Registration.Input.Session {
		t.Fatal("two deliveries share a child session")
	}
}

// A delivery whose process can never be registered (here: the event and
// the fixed arguments exceed a process's input bound) is marked failed
// with the reason, once: no sweep tries it again.
func testUnstartable(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	c := d.Client()
	tr := triggers.New(c, "op")
	big := spec("deploy", ">")
	big.Start.Args = json.RawMessage(`{"pad":"` + strings.Repeat("x", 15<<10) + `"}`)
	register(t, ctx, tr, host, "big", big)
	r, procs := router(t, d.Reopen(t), "node-a", triggers.RouterConfig{SweepAfter: time.Millisecond, SweepEvery: time.Hour})
	m := signal(t, ctx, c, "deploy.1", "huge", `"`+strings.Repeat("y", 60<<10)+`"`)
	if _, _, err := r.Deliver(ctx, m); !errors.Is(err, processes.ErrInvalid) {
		t.Fatalf("Deliver = %v, want the registry's refusal", err)
	}
	ds, err := tr.Deliveries(ctx)
	if err != nil || len(ds) != 1 || ds[0].Started || !strings.Contains(ds[0].Failed, "invalid") {
		t.Fatalf("deliveries %+v, %v; want one marked failed", ds, err)
	}
	if _, _, err := r.Deliver(ctx, m); err != nil {
		t.Fatalf("a redelivery: %v", err)
	}
	testenv.WaitFor(t, settle, func() error {
		if n := len(r.Open()); n != 0 {
			return errors.New("the failed delivery is still open")
		}
		return nil
	})
	if n := r.Sweep(ctx); n != 0 {
		t.Fatalf("the sweep started %d", n)
	}
	if ids := processIDs(t, ctx, procs); len(ids) != 0 {
		t.Fatalf("processes %v", ids)
	}
}

// Prune removes an occurrence only once every delivery is done with, and
// takes its deliveries and signal with it; receipts and deleted
// subscriptions go once past the cutoff.
func testPrune(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	c := d.Client()
	tr := triggers.New(c, "op")
	kept := register(t, ctx, tr, host, "kept", spec("deploy", ">"))
	gone := register(t, ctx, tr, host, "gone", spec("deploy", ">"))
	if _, err := act(ctx, tr, triggers.ActDelete, gone.Subscription, 0, nil); err != nil {
		t.Fatal(err)
	}
	m := signal(t, ctx, c, "deploy.7", "sig-7", `{}`)
	r, procs := router(t, d.Reopen(t), "node-a", triggers.RouterConfig{})
	o, ds, err := r.Deliver(ctx, m)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Deliver = %d deliveries, %v; want 1", len(ds), err)
	}
	running := map[string]bool{}
	for _, id := range processIDs(t, ctx, procs) {
		running[id] = true
	}
	registered := func(pid string) bool { return running[pid] }

	// Before the cutoff nothing goes.
	if p, err := tr.Prune(ctx, time.Now().Add(-time.Hour), registered); err != nil || p != (triggers.Pruned{}) {
		t.Fatalf("prune before the cutoff = %+v, %v", p, err)
	}
	// A delivery whose process is still registered keeps its occurrence.
	p, err := tr.Prune(ctx, time.Now().Add(time.Hour), registered)
	if err != nil || p.Occurrences != 0 || p.Deliveries != 0 || p.Signals != 0 {
		t.Fatalf("prune with a live process = %+v, %v", p, err)
	}
	if p.Receipts != 3 || p.Subscriptions != 1 {
		t.Fatalf("prune removed %d receipts and %d subscriptions; want 3 and 1", p.Receipts, p.Subscriptions)
	}
	if _, err := tr.Get(ctx, kept.Subscription, nil); err != nil {
		t.Fatalf("a live subscription went with the prune: %v", err)
	}
	// Its process gone, all of it goes.
	clear(running)
	p, err = tr.Prune(ctx, time.Now().Add(time.Hour), registered)
	if err != nil || p.Occurrences != 1 || p.Deliveries != 1 || p.Signals != 1 {
		t.Fatalf("prune after the process ended = %+v, %v", p, err)
	}
	if occs, err := tr.Occurrences(ctx, 0, 0); err != nil || len(occs) != 0 {
		t.Fatalf("occurrences after prune = %d, %v", len(occs), err)
	}
	if _, err := tr.Occurrence(ctx, o.ID); err == nil {
		t.Fatal("the pruned occurrence is still readable")
	}
	if _, err := c.NextOnSubject(ctx, m.Subject, m.Seq); err == nil {
		t.Fatal("the delivered signal is still on the stream")
	}
	if p, err := tr.Prune(ctx, time.Now().Add(time.Hour), registered); err != nil || p != (triggers.Pruned{}) {
		t.Fatalf("a second prune = %+v, %v", p, err)
	}
}
