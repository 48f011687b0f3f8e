package proctest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/conformance"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

func testRegisterIdempotent(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	a := processes.New(d.Client(), "node-a")
	b := processes.New(d.Reopen(t), "node-b")
	first := register(t, ctx, a, "p1", tool(`{"target": "all"}`))
	// The same content, spelled otherwise, from another node.
	again := tool(`{"target":"all"}`)
	again.EventTypes = []string{"progress", "progress"}
	p, created, err := b.Register(ctx, "p1", again)
	if err != nil || created || p.Hash != first.Hash || p.Events != 1 {
		t.Fatalf("second Register = created %v, %+v, %v; want the first process back, 1 event", created, p, err)
	}
	_, _, err = b.Register(ctx, "p1", tool(`{"target":"some"}`))
	wantErr(t, "Register with other content", err, processes.ErrConflict)
	if got := events(t, ctx, a, "p1"); !equal(got, []string{processes.TypeRegistered}) {
		t.Fatalf("events after a conflicting registration: %v", got)
	}
	if p.Status() != processes.Pending || p.Registration.Provenance.Host != "node-a" {
		t.Fatalf("registered process: status %s, provenance %+v", p.Status(), p.Registration.Provenance)
	}
}

func testRegisterInvalid(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	cases := map[string]processes.Registration{}
	noDisp := tool(`{}`)
	noDisp.Disposition = ""
	cases["no disposition"] = noDisp
	ext := external("job-1")
	ext.Disposition = processes.Rerunnable
	cases["external work that lash would re-run"] = ext
	builtin := tool(`{}`)
	builtin.EventTypes = []string{"completed"}
	cases["a built-in type declared"] = builtin
	badType := tool(`{}`)
	badType.EventTypes = []string{"Has Spaces"}
	cases["a malformed event type"] = badType
	badArgs := tool(`{"open":`)
	cases["arguments that are not JSON"] = badArgs
	both := tool(`{}`)
	both.Provenance.Session = "s1"
	cases["two originators"] = both
	long := tool(`{}`)
	long.Input.Tool = strings.Repeat("x", streams.MaxIDBytes+1)
	cases["a tool name over the id bound"] = long
	big := tool(`"` + strings.Repeat("x", processes.MaxDataBytes) + `"`)
	cases["an input over the data bound"] = big
	for what, reg := range cases {
		_, _, err := r.Register(ctx, "p-"+strings.ReplaceAll(what, " ", "-"), reg)
		wantErr(t, what, err, processes.ErrInvalid)
		if _, err := r.Get(ctx, "p-"+strings.ReplaceAll(what, " ", "-")); !errors.Is(err, processes.ErrUnknown) {
			t.Fatalf("%s: Get after the refusal = %v, want ErrUnknown (nothing written)", what, err)
		}
	}
	_, _, err := r.Register(ctx, strings.Repeat("p", streams.MaxIDBytes+1), tool(`{}`))
	wantErr(t, "an id over the bound", err, processes.ErrInvalid)
}

func testDenseDeclared(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	register(t, ctx, r, "p1", tool(`{}`))
	run, err := r.Start(ctx, "p1", leases.LocalOwner("node-a"))
	if err != nil || run.Attempt() != 1 || run.Token() != 1 {
		t.Fatalf("Start = attempt %v, %v", run, err)
	}
	for i := range 3 {
		if _, err := run.Emit(ctx, "progress", "", map[string]int{"done": i}); err != nil {
			t.Fatalf("Emit progress %d: %v", i, err)
		}
	}
	_, err = run.Emit(ctx, "tests_passed", "", nil)
	wantErr(t, "an undeclared event type", err, processes.ErrInvalid)
	_, err = run.Emit(ctx, "progress", "", json.RawMessage(`{"not json`))
	if err == nil {
		t.Fatal("event data that is not JSON was accepted")
	}
	if _, err := run.Emit(ctx, processes.TypeWaiting, "", nil); err != nil {
		t.Fatal(err)
	}
	if st := run.Process().Status(); st != processes.Waiting {
		t.Fatalf("status after waiting: %s", st)
	}
	want := []string{"registered", "started", "progress", "progress", "progress", "waiting"}
	if got := events(t, ctx, r, "p1"); !equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// Events after a number: the tail a watcher asks for.
	tail, err := r.Events(ctx, "p1", 4)
	if err != nil || len(tail) != 2 || tail[0].N != 5 {
		t.Fatalf("Events after 4 = %+v, %v", tail, err)
	}
}

func testKeyed(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	register(t, ctx, r, "p1", tool(`{}`))
	run, err := r.Start(ctx, "p1", leases.LocalOwner("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	c1, err := r.RequestCancel(ctx, "p1", "user asked")
	if err != nil {
		t.Fatal(err)
	}
	c2, err := processes.New(d.Reopen(t), "node-b").RequestCancel(ctx, "p1", "another reason")
	if err != nil || c2.N != c1.N {
		t.Fatalf("second cancel request = %+v, %v; want the first (event %d)", c2, err, c1.N)
	}
	// Keyed progress: a repeat is a no-op, other content under the key a conflict.
	if _, err := run.Emit(ctx, "progress", "half", 50); err != nil {
		t.Fatal(err)
	}
	if e, err := run.Emit(ctx, "progress", "half", 50); err != nil || e.N != 4 {
		t.Fatalf("repeated keyed event = %+v, %v; want event 4 back", e, err)
	}
	_, err = run.Emit(ctx, "progress", "half", 51)
	wantErr(t, "other content under a used key", err, processes.ErrConflict)
	if err := run.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if run.Process().CancelRequested == nil {
		t.Fatal("the run does not see the cancel request")
	}
	done, err := run.Cancelled(ctx, "as asked")
	if err != nil {
		t.Fatal(err)
	}
	again, err := run.Cancelled(ctx, "as asked")
	if err != nil || again.N != done.N {
		t.Fatalf("repeated terminal = %+v, %v; want event %d back", again, err, done.N)
	}
	_, err = run.Complete(ctx, json.RawMessage(`"ok"`))
	wantErr(t, "a different terminal", err, processes.ErrTerminal)
	_, err = run.Emit(ctx, "progress", "", 99)
	wantErr(t, "an event after the terminal", err, processes.ErrTerminal)
	want := []string{"registered", "started", "cancel_requested", "progress", "cancelled"}
	if got := events(t, ctx, r, "p1"); !equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func testOneTerminal(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	register(t, ctx, processes.New(d.Client(), "node-a"), "job", external("job-7"))
	regs := make([]*processes.Registry, racers)
	for i := range regs {
		regs[i] = processes.New(d.Reopen(t), fmt.Sprintf("node-%d", i))
	}
	type result struct {
		e   *processes.Event
		dup bool
		err error
	}
	res := conformance.Race(racers, func(i int) result {
		typ := processes.TypeCompleted
		if i%2 == 1 {
			typ = processes.TypeFailed
		}
		e, dup, err := regs[i].Finish(ctx, "job", typ, map[string]int{"writer": i}, processes.ByExternalOwner)
		return result{e, dup, err}
	})
	won := 0
	for i, r := range res {
		switch {
		case r.err == nil && !r.dup:
			won++
		case errors.Is(r.err, processes.ErrTerminal):
		default:
			t.Fatalf("writer %d: %+v, %v; want the terminal or ErrTerminal", i, r.e, r.err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers wrote a terminal, want exactly 1", won)
	}
	got := events(t, ctx, regs[0], "job")
	terminals := 0
	for _, typ := range got {
		if processes.Terminal(typ) {
			terminals++
		}
	}
	if terminals != 1 || len(got) != 2 {
		t.Fatalf("events %v: want the registration and one terminal", got)
	}
	// Racing cancel requests: one event.
	register(t, ctx, regs[0], "job2", external("job-8"))
	conformance.Race(racers, func(i int) error {
		_, err := regs[i].RequestCancel(ctx, "job2", fmt.Sprint(i))
		if err != nil {
			t.Errorf("cancel request %d: %v", i, err)
		}
		return err
	})
	if got := events(t, ctx, regs[0], "job2"); !equal(got, []string{"registered", "cancel_requested"}) {
		t.Fatalf("events after racing cancel requests: %v", got)
	}
}

func testUnknown(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	_, err := r.Get(ctx, "nobody")
	wantErr(t, "Get", err, processes.ErrUnknown)
	_, err = r.RequestCancel(ctx, "nobody", "")
	wantErr(t, "RequestCancel", err, processes.ErrUnknown)
	_, err = r.Await(ctx, "nobody")
	wantErr(t, "Await", err, processes.ErrUnknown)
	_, _, err = r.Finish(ctx, "nobody", processes.TypeCompleted, nil, processes.ByExternalOwner)
	wantErr(t, "Finish", err, processes.ErrUnknown)
	_, err = r.Start(ctx, "nobody", leases.LocalOwner("node-a"))
	wantErr(t, "Start", err, processes.ErrUnknown)
	if _, err := r.Get(ctx, "nobody"); !errors.Is(err, processes.ErrUnknown) {
		t.Fatalf("after refused writes, Get = %v; want still unknown", err)
	}
	// A registered process refuses what its rules forbid, and stays as it was.
	register(t, ctx, r, "p1", tool(`{}`))
	_, _, err = r.Append(ctx, "p1", processes.Event{Type: "progress", Data: json.RawMessage(`1`)}, nil)
	wantErr(t, "progress without a run", err, processes.ErrRefused)
	_, _, err = r.Finish(ctx, "p1", processes.TypeCompleted, nil, processes.ByExternalOwner)
	wantErr(t, "an external owner's end of work lash runs", err, processes.ErrRefused)
	if got := events(t, ctx, r, "p1"); !equal(got, []string{"registered"}) {
		t.Fatalf("events after refused writes: %v", got)
	}
}

// testFencing: each start takes a token newer than any on the log, and
// fences out the runner it took over from; a run that handed its attempt
// back writes nothing more.
func testFencing(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	ra := processes.New(d.Client(), "node-a")
	cb := d.Reopen(t)
	rb := processes.New(cb, "node-b")
	register(t, ctx, ra, "p1", tool(`{}`))
	runA, err := ra.Start(ctx, "p1", leases.LocalOwner("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	// B takes over (recovery found A gone): attempt 2, a newer token.
	runB, err := rb.Start(ctx, "p1", leases.LocalOwner("node-b"))
	if err != nil || runB.Attempt() != 2 || runB.Token() <= runA.Token() {
		t.Fatalf("B's Start = %+v, %v; want attempt 2 with a token above A's %d", runB, err, runA.Token())
	}
	// A, paused through the takeover without knowing it, comes back.
	_, err = runA.Emit(ctx, "progress", "", 1)
	wantErr(t, "the superseded runner's progress", err, processes.ErrFenced)
	_, err = runA.Complete(ctx, json.RawMessage(`"stale"`))
	wantErr(t, "the superseded runner's completion", err, processes.ErrFenced)
	_, err = runA.Cancelled(ctx, "stale")
	wantErr(t, "the superseded runner's cancellation", err, processes.ErrFenced)
	_, err = runA.Release(ctx)
	wantErr(t, "the superseded runner's release", err, processes.ErrFenced)
	// B hands its attempt back: it may write nothing more, and the next
	// start is attempt 3.
	if _, err := runB.Release(ctx); err != nil {
		t.Fatalf("B's release: %v", err)
	}
	if p, err := ra.Get(ctx, "p1"); err != nil || p.Status() != processes.Pending || p.InAttempt() {
		t.Fatalf("after the release: %+v, %v; want pending, in no attempt", p, err)
	}
	_, err = runB.Complete(ctx, json.RawMessage(`"late"`))
	wantErr(t, "a released run's completion", err, processes.ErrFenced)
	runC, err := ra.Start(ctx, "p1", leases.LocalOwner("node-a"))
	if err != nil || runC.Attempt() != 3 {
		t.Fatalf("the start after the release = %+v, %v; want attempt 3", runC, err)
	}
	if _, err := runC.Complete(ctx, json.RawMessage(`"built"`)); err != nil {
		t.Fatalf("C's completion: %v", err)
	}
	p, err := rb.Get(ctx, "p1")
	if err != nil || p.Status() != processes.Completed || string(p.End.Data) != `"built"` || p.End.Token != runC.Token() {
		t.Fatalf("process after C completed: %+v, %v", p, err)
	}
	want := []string{"registered", "started", "started", "released", "started", "completed"}
	if got := events(t, ctx, ra, "p1"); !equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func testOwnerBoundOnce(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	reg := tool(`{"cmd":"deploy"}`)
	reg.Disposition = processes.OwnerBound
	register(t, ctx, r, "p1", reg)
	o := leases.LocalOwner("node-a")
	run, err := r.Start(ctx, "p1", o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Release(ctx)
	wantErr(t, "a release of owner-bound work", err, processes.ErrRefused)
	_, err = r.Start(ctx, "p1", o)
	wantErr(t, "a second start of owner-bound work", err, processes.ErrRefused)
	register(t, ctx, r, "ext", external("job-9"))
	_, err = r.Start(ctx, "ext", o)
	wantErr(t, "a start of externally owned work", err, processes.ErrRefused)
	if got := events(t, ctx, r, "p1"); !equal(got, []string{"registered", "started"}) {
		t.Fatalf("events %v", got)
	}
}

func testAbandon(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "sweeper")
	register(t, ctx, r, "ext", external("job-1"))
	a := processes.Abandonment{Writer: processes.ReconciledRequest, Evidence: "request"}
	_, _, err := r.Finish(ctx, "ext", processes.TypeAbandoned, a, processes.ByReconciledRequest)
	wantErr(t, "abandon without a request", err, processes.ErrRefused)
	req, err := r.RequestAbandon(ctx, "ext", "the job runner was decommissioned")
	if err != nil {
		t.Fatal(err)
	}
	a.Evidence = fmt.Sprintf("abandon request, event %d", req.N)
	if _, _, err := r.Finish(ctx, "ext", processes.TypeAbandoned, a, processes.ByReconciledRequest); err != nil {
		t.Fatal(err)
	}
	// Owner-bound work a node started is abandoned with its runner's
	// token, naming the owner and the evidence.
	reg := tool(`{}`)
	reg.Disposition = processes.OwnerBound
	register(t, ctx, r, "ob", reg)
	run, err := r.Start(ctx, "ob", leases.LocalOwner("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = r.Finish(ctx, "ob", processes.TypeAbandoned, processes.Abandonment{Writer: processes.Sweep, Evidence: "x"}, processes.ByReconciledRequest)
	wantErr(t, "a sweep's abandon without a token", err, processes.ErrRefused)
	if _, err := run.Drained(ctx); err != nil {
		t.Fatal(err)
	}
	for id, writer := range map[string]processes.AbandonWriter{"ext": processes.ReconciledRequest, "ob": processes.OwnerDrain} {
		p, err := r.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var got processes.Abandonment
		if p.Status() != processes.Abandoned || json.Unmarshal(p.End.Data, &got) != nil || got.Writer != writer || got.Evidence == "" {
			t.Fatalf("%s: status %s, abandonment %s; want abandoned by %s with evidence", id, p.Status(), p.End.Data, writer)
		}
		if writer == processes.OwnerDrain && (got.Owner == nil || got.Owner.Node != "node-a") {
			t.Fatalf("a drained process names owner %+v, want node-a", got.Owner)
		}
	}
}

func testAwaitEnded(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	register(t, ctx, r, "job", external("job-1"))
	if _, _, err := r.Finish(ctx, "job", processes.TypeCompleted, "done", processes.ByExternalOwner); err != nil {
		t.Fatal(err)
	}
	p, err := r.Await(ctx, "job")
	if err != nil || p.Status() != processes.Completed || p.Events != 2 {
		t.Fatalf("Await of an ended process = %+v, %v", p, err)
	}
}

func testAwaitRacing(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	for round := range 3 {
		id := fmt.Sprintf("job-%d", round)
		register(t, ctx, r, id, external(id))
		awaiters := make([]*processes.Registry, racers)
		for i := range awaiters {
			awaiters[i] = processes.New(d.Reopen(t), "watcher")
		}
		res := conformance.Race(racers+1, func(i int) error {
			if i == racers {
				_, _, err := r.Finish(ctx, id, processes.TypeFailed, processes.Failure{Code: "boom"}, processes.ByExternalOwner)
				return err
			}
			p, err := awaiters[i].Await(ctx, id)
			if err == nil && p.Status() != processes.Failed {
				err = fmt.Errorf("status %s", p.Status())
			}
			return err
		})
		for i, err := range res {
			if err != nil {
				t.Fatalf("round %d, racer %d: %v", round, i, err)
			}
		}
	}
}

func testGrants(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	p := register(t, ctx, r, "job", external("job-1")) // started by s1, waking s1
	if !p.Granted("s1") || p.Granted("s2") || p.WakesTarget() != "s1" {
		t.Fatalf("grants at registration: %v, wakes %q", p.Grants, p.WakesTarget())
	}
	p, err := r.Grant(ctx, "job", "s2", "s1") // transfer
	if err != nil || p.Granted("s1") || !p.Granted("s2") || p.WakesTarget() != "" {
		t.Fatalf("after a transfer to s2: %v, wakes %q, %v", p.Grants, p.WakesTarget(), err)
	}
	_, err = r.Grant(ctx, "job", "s3", "s1")
	wantErr(t, "a transfer from a session without a grant", err, processes.ErrRefused)
	if p, err = r.Grant(ctx, "job", "s2", ""); err != nil || p.Events != 2 {
		t.Fatalf("granting a grant held: %d events, %v; want nothing written", p.Events, err)
	}
	if _, _, err := r.Finish(ctx, "job", processes.TypeCompleted, "done", processes.ByExternalOwner); err != nil {
		t.Fatal(err)
	}
	// Grants change after the end; the process does not.
	if p, err = r.Revoke(ctx, "job", "s2"); err != nil || len(p.Grants) != 0 || p.Status() != processes.Completed {
		t.Fatalf("after revoking s2: %v, %s, %v", p.Grants, p.Status(), err)
	}
	if p, err = r.Revoke(ctx, "job", "s2"); err != nil || p.Events != 4 {
		t.Fatalf("revoking again: %d events, %v; want nothing written", p.Events, err)
	}
	_, _, err = r.Append(ctx, "job", processes.Event{Type: processes.TypeGranted, Data: json.RawMessage(`{"session":""}`)}, nil)
	wantErr(t, "a grant without a session", err, processes.ErrInvalid)
	if got := events(t, ctx, r, "job"); !equal(got, []string{"registered", "granted", "completed", "revoked"}) {
		t.Fatalf("events %v", got)
	}
}

func testPrune(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	for _, id := range []string{"old", "recent", "open"} {
		register(t, ctx, r, id, external(id))
	}
	finish := func(id string) {
		t.Helper()
		if _, _, err := r.Finish(ctx, id, processes.TypeCompleted, id, processes.ByExternalOwner); err != nil {
			t.Fatal(err)
		}
	}
	finish("old")
	p, err := r.Get(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	cutoff := p.End.At.Add(time.Nanosecond)
	// The next end must be stamped after the cutoff.
	testenv.WaitFor(t, 5*time.Second, func() error {
		if !time.Now().After(cutoff) {
			return fmt.Errorf("the clock has not passed the cutoff")
		}
		return nil
	})
	finish("recent")
	pruned, err := r.Prune(ctx, cutoff)
	if err != nil || !equal(pruned, []string{"old"}) {
		t.Fatalf("Prune before the cutoff = %v, %v; want [old]", pruned, err)
	}
	if _, err := r.Get(ctx, "old"); !errors.Is(err, processes.ErrUnknown) {
		t.Fatalf("a pruned process: %v", err)
	}
	pruned, err = r.Prune(ctx, time.Now().Add(time.Hour))
	if err != nil || !equal(pruned, []string{"recent"}) {
		t.Fatalf("Prune of everything ended = %v, %v; want [recent] and never the open one", pruned, err)
	}
	if p, err := r.Get(ctx, "open"); err != nil || p.Ended() || p.Events != 1 {
		t.Fatalf("the open process after prunes: %+v, %v", p, err)
	}
}

// testTreeBudget: places in a tree of sub-agents are taken by a
// compare-and-set, so racing reservers never take more than the budget,
// in all or per session; a pid holding a place takes no other; and the
// budget record goes with the last of its tree's processes.
func testTreeBudget(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "node-a")
	b := processes.Budget{PerTree: 10, PerSession: 4}
	tree := processes.TreeID("lead", "in-1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := map[string]int{}
	for i := range 40 {
		wg.Go(func() {
			session := fmt.Sprint("s", i%5)
			err := r.Reserve(ctx, tree, session, fmt.Sprint("p", i), b)
			if err != nil && !errors.Is(err, processes.ErrBudget) {
				t.Errorf("Reserve: %v", err)
			}
			if err == nil {
				mu.Lock()
				took[session]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := 0
	for s, n := range took {
		if n > b.PerSession {
			t.Fatalf("session %s took %d places, at most %d", s, n, b.PerSession)
		}
		total += n
	}
	if total != b.PerTree {
		t.Fatalf("%d places taken, want the tree's %d", total, b.PerTree)
	}
	// A pid that holds a place takes none again; another finds none.
	var holder string
	for i := range 40 {
		if r.Reserve(ctx, tree, fmt.Sprint("s", i%5), fmt.Sprint("p", i), b) == nil {
			holder = fmt.Sprint("p", i)
		}
	}
	if holder == "" {
		t.Fatal("no pid holds a place")
	}
	if err := r.Reserve(ctx, tree, "s9", "p-new", b); !errors.Is(err, processes.ErrBudget) {
		t.Fatalf("a new pid in a full tree: %v", err)
	}
	// Another tree has a budget of its own.
	if err := r.Reserve(ctx, processes.TreeID("lead", "in-2"), "lead", "q1", b); err != nil {
		t.Fatal(err)
	}
	// Prune removes the budget of a tree with no process registered, and
	// keeps one whose process is still there.
	register(t, ctx, r, holder, external(holder))
	if _, err := r.Prune(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	subj := d.Client().Subjects()
	for id, kept := range map[string]bool{tree: true, processes.TreeID("lead", "in-2"): false} {
		s, err := subj.ProcessTree(id)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Client().Head(ctx, s)
		if kept && err != nil || !kept && !errors.Is(err, streams.ErrNotFound) {
			t.Fatalf("tree %s after a prune: %v; kept %v", id, err, kept)
		}
	}
}
