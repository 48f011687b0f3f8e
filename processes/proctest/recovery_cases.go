package proctest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/conformance"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

// executor runs a process by calling fn, counting executions per process.
type executor struct {
	fn    func(ctx context.Context, run *processes.Run) (json.RawMessage, error)
	mu    sync.Mutex
	count map[string]int
}

func (x *executor) Execute(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
	x.mu.Lock()
	if x.count == nil {
		x.count = map[string]int{}
	}
	x.count[run.Process().ID]++
	x.mu.Unlock()
	return x.fn(ctx, run)
}

func (x *executor) runs(id string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.count[id]
}

// worker starts a worker on c as node id; it stops when the test ends or
// when stop is called, which waits for it.
func worker(t *testing.T, c *streams.Client, id string, x processes.Executor) (stop func()) {
	t.Helper()
	m := holder(t, testCtx(t), c, id)
	return runWorker(t, c, m, x)
}

// runWorker starts a worker on c as m's owner; it stops when the test ends
// or when stop is called, which waits for it.
func runWorker(t *testing.T, c *streams.Client, m *leases.Manager, x processes.Executor) (stop func()) {
	t.Helper()
	id := m.Owner().ID
	ctx, cancel := context.WithCancel(context.Background())
	w := processes.NewWorker(processes.WorkerConfig{Registry: processes.New(c, id), Leases: m, Store: c, Executor: x,
		Sweep: 200 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker %s: %v", id, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func await(t *testing.T, r *processes.Registry, id string) *processes.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p, err := r.Await(ctx, id)
	if err != nil {
		t.Fatalf("Await(%s): %v", id, err)
	}
	return p
}

func testWorkersRunOnce(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "client")
	x := &executor{fn: func(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
		if _, err := run.Emit(ctx, "progress", "", 1); err != nil {
			return nil, err
		}
		return run.Registration().Input.Args, nil
	}}
	for i := range 3 {
		worker(t, d.Reopen(t), fmt.Sprintf("worker-%d", i), x)
	}
	const n = 12
	for i := range n {
		register(t, ctx, r, fmt.Sprint("p", i), tool(fmt.Sprintf(`{"n":%d}`, i)))
	}
	for i := range n {
		id := fmt.Sprint("p", i)
		p := await(t, r, id)
		if p.Status() != processes.Completed || string(p.End.Data) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("%s ended %s with %s", id, p.Status(), p.End.Data)
		}
		if got := events(t, ctx, r, id); !equal(got, []string{"registered", "started", "progress", "completed"}) {
			t.Fatalf("%s: events %v; want one attempt", id, got)
		}
		if runs := x.runs(id); runs != 1 {
			t.Fatalf("%s executed %d times", id, runs)
		}
	}
}

func testWorkerCancel(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "client")
	started := make(chan struct{}, 1)
	x := &executor{fn: func(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	stop := worker(t, d.Reopen(t), "worker", x)
	register(t, ctx, r, "long", tool(`{}`))
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the process never started")
	}
	if _, err := r.RequestCancel(ctx, "long", "no longer needed"); err != nil {
		t.Fatal(err)
	}
	p := await(t, r, "long")
	if p.Status() != processes.Cancelled || !strings.Contains(string(p.End.Data), "no longer needed") {
		t.Fatalf("ended %s with %s; want cancelled naming the request", p.Status(), p.End.Data)
	}
	stop()
	// A process cancelled before anyone ran it ends cancelled unrun.
	stopped := &executor{fn: func(context.Context, *processes.Run) (json.RawMessage, error) { return nil, nil }}
	reg := tool(`{"queued":true}`)
	register(t, ctx, r, "queued", reg)
	if _, err := r.RequestCancel(ctx, "queued", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	worker(t, d.Reopen(t), "worker-2", stopped)
	if p := await(t, r, "queued"); p.Status() != processes.Cancelled || p.Started() || stopped.runs("queued") != 0 {
		t.Fatalf("queued process: %s, executed %d times", p.Status(), stopped.runs("queued"))
	}
}

// testDrain: a worker that stops hands rerunnable work back (another
// re-runs it, attempt 2) and marks its started owner-bound work abandoned.
func testDrain(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "client")
	var inFlight atomic.Int32
	block := &executor{fn: func(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
		inFlight.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	stop := worker(t, d.Reopen(t), "draining", block)
	register(t, ctx, r, "rerun", tool(`{}`))
	bound := tool(`{}`)
	bound.Disposition = processes.OwnerBound
	register(t, ctx, r, "bound", bound)
	testenv.WaitFor(t, 15*time.Second, func() error {
		if n := inFlight.Load(); n != 2 {
			return fmt.Errorf("%d attempts running, want 2", n)
		}
		return nil
	})
	stop()
	p := await(t, r, "bound")
	var a processes.Abandonment
	if p.Status() != processes.Abandoned || json.Unmarshal(p.End.Data, &a) != nil || a.Writer != processes.OwnerDrain || a.Owner == nil || a.Owner.Node != "draining" {
		t.Fatalf("owner-bound work after the drain: %s %s", p.Status(), p.End.Data)
	}
	if p, err := r.Get(ctx, "rerun"); err != nil || p.Ended() {
		t.Fatalf("rerunnable work after the drain: %+v, %v; want it open", p, err)
	}
	done := &executor{fn: func(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprint(run.Attempt())), nil
	}}
	worker(t, d.Reopen(t), "next", done)
	if p := await(t, r, "rerun"); p.Status() != processes.Completed || string(p.End.Data) != "2" {
		t.Fatalf("rerunnable work on the next worker: %s %s; want completed by attempt 2", p.Status(), p.End.Data)
	}
}

// testRecoveryVerdicts: processes whose runner is gone, for each
// disposition, started or not, with and without proof of its death.
func testRecoveryVerdicts(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "client")
	// A runner that dies: its node's liveness key is deleted (proof of
	// death).
	deadOwner := leases.LocalOwner("dead-node")
	dead := leases.New(d.Client(), deadOwner)
	if err := dead.Beat(ctx, longTTL); err != nil {
		t.Fatal(err)
	}
	// A silent runner: alive as far as anyone can tell, it writes nothing.
	silent := holder(t, ctx, d.Client(), "silent-node")
	startBy := func(m *leases.Manager, id string, reg processes.Registration) {
		register(t, ctx, r, id, reg)
		if _, err := r.Start(ctx, id, m.Owner()); err != nil {
			t.Fatal(err)
		}
	}
	rerun := tool(`{}`)
	bound := tool(`{}`)
	bound.Disposition = processes.OwnerBound
	startBy(dead, "rerun-dead", rerun)
	startBy(dead, "bound-dead", bound)
	startBy(dead, "bound-requested", bound)
	startBy(silent, "bound-silent", bound)
	startBy(silent, "bound-silent-requested", bound)
	startBy(silent, "rerun-silent", rerun)
	register(t, ctx, r, "bound-new", bound)
	register(t, ctx, r, "external", external("job-1"))
	register(t, ctx, r, "external-requested", external("job-2"))
	for _, id := range []string{"bound-requested", "bound-silent-requested", "external-requested"} {
		if _, err := r.RequestAbandon(ctx, id, "the operator says so"); err != nil {
			t.Fatal(err)
		}
	}
	// The dead node's liveness goes.
	key, _ := leases.Key("node", "dead-node")
	e, err := d.Client().KVGet(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client().KVDelete(ctx, key, e.Revision); err != nil {
		t.Fatal(err)
	}
	x := &executor{fn: func(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
		return json.RawMessage(`"ran"`), nil
	}}
	worker(t, d.Reopen(t), "sweeper", x)
	want := map[string]struct {
		status processes.Status
		writer processes.AbandonWriter
		runs   int
	}{
		"rerun-dead":         {processes.Completed, "", 1},
		"bound-dead":         {processes.Abandoned, processes.Sweep, 0},
		"bound-requested":    {processes.Abandoned, processes.ReconciledRequest, 0},
		"bound-new":          {processes.Completed, "", 1},
		"external-requested": {processes.Abandoned, processes.ReconciledRequest, 0},
	}
	for id, w := range want {
		p := await(t, r, id)
		var a processes.Abandonment
		_ = json.Unmarshal(p.End.Data, &a)
		if p.Status() != w.status || a.Writer != w.writer || x.runs(id) != w.runs {
			t.Fatalf("%s: %s by %q, executed %d times; want %s by %q, %d", id, p.Status(), a.Writer, x.runs(id), w.status, w.writer, w.runs)
		}
		if strings.HasPrefix(id, "bound-") && w.writer != "" && (!strings.Contains(a.Evidence, "liveness gone") || a.Owner == nil || a.Owner.Node != "dead-node") {
			t.Fatalf("%s: abandoned on evidence %q naming %+v", id, a.Evidence, a.Owner)
		}
	}
	// Time alone ends nothing: the silent runner's started work stays
	// open, and is not run again, request or not, and external work is
	// never run, over some fifteen sweeps.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, id := range []string{"bound-silent", "bound-silent-requested", "rerun-silent", "external"} {
			p, err := r.Get(ctx, id)
			if err != nil || p.Ended() || x.runs(id) != 0 {
				t.Fatalf("%s: %+v, %v, executed %d times; want it left as it is", id, p, err, x.runs(id))
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// testGivesUp: a rerunnable process whose attempts all began and none
// ended (a node that dies running it, again and again) is marked abandoned
// after MaxAttempts, not run for ever.
func testGivesUp(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "client")
	register(t, ctx, r, "crashy", tool(`{}`))
	gone := leases.LocalOwner("gone-node") // no liveness key: proved dead
	for range processes.MaxAttempts {
		if _, err := r.Start(ctx, "crashy", gone); err != nil {
			t.Fatal(err)
		}
	}
	x := &executor{fn: func(context.Context, *processes.Run) (json.RawMessage, error) { return json.RawMessage(`"ran"`), nil }}
	worker(t, d.Reopen(t), "sweeper", x)
	p := await(t, r, "crashy")
	var a processes.Abandonment
	if p.Status() != processes.Abandoned || json.Unmarshal(p.End.Data, &a) != nil || a.Writer != processes.GaveUp || x.runs("crashy") != 0 {
		t.Fatalf("after %d attempts: %s %s, executed %d times; want abandoned by gave_up, not run", processes.MaxAttempts, p.Status(), p.End.Data, x.runs("crashy"))
	}
}

// testOwnStopped: started work whose runner is the worker's own node but
// which the worker does not run (an attempt that stopped with no outcome
// written) is taken up on the runner's own word, though its node lives:
// owner-bound work is abandoned, rerunnable work runs again.
func testOwnStopped(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "client")
	c := d.Reopen(t)
	m := holder(t, ctx, c, "runner")
	bound := tool(`{}`)
	bound.Disposition = processes.OwnerBound
	register(t, ctx, r, "deploy", bound)
	register(t, ctx, r, "build", tool(`{}`))
	for _, id := range []string{"deploy", "build"} {
		if _, err := r.Start(ctx, id, m.Owner()); err != nil {
			t.Fatal(err)
		}
	}
	x := &executor{fn: func(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprint(run.Attempt())), nil
	}}
	runWorker(t, c, m, x)
	p := await(t, r, "deploy")
	var a processes.Abandonment
	if p.Status() != processes.Abandoned || json.Unmarshal(p.End.Data, &a) != nil || a.Writer != processes.Sweep ||
		!strings.Contains(a.Evidence, "stopped attempt 1") || x.runs("deploy") != 0 {
		t.Fatalf("owner-bound work its runner stopped: %s %s, executed %d times; want abandoned on the runner's word, not run", p.Status(), p.End.Data, x.runs("deploy"))
	}
	if p := await(t, r, "build"); p.Status() != processes.Completed || string(p.End.Data) != "2" || x.runs("build") != 1 {
		t.Fatalf("rerunnable work its runner stopped: %s %s, executed %d times; want completed by attempt 2", p.Status(), p.End.Data, x.runs("build"))
	}
}

// testWaitersApart: attempts of one class take slots of their own, so a
// process of another class runs while more of the first than a class's
// slots are blocked; one turned away for want of a slot starts as soon as
// one frees, not at the next sweep.
func testWaitersApart(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "client")
	release := make(chan struct{})
	defer close(release)
	x := &executor{fn: func(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
		if run.Registration().Label == "waits" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return json.RawMessage(`"done"`), nil
	}}
	c := d.Reopen(t)
	wctx, cancel := context.WithCancel(context.Background())
	w := processes.NewWorker(processes.WorkerConfig{Registry: processes.New(c, "worker"), Leases: holder(t, ctx, c, "worker"), Store: c, Executor: x,
		Sweep: time.Hour, Concurrency: 1,
		Class: func(p *processes.Process) (string, int) {
			if p.Registration.Label == "waits" {
				return "waits", 3
			}
			return "", 0
		}})
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { cancel(); <-done }()
	for i := range 3 {
		reg := tool(fmt.Sprintf(`{"n":%d}`, i))
		reg.Label = "waits"
		register(t, ctx, r, fmt.Sprint("waiter-", i), reg)
	}
	testenv.WaitFor(t, 15*time.Second, func() error {
		for i := range 3 {
			if x.runs(fmt.Sprint("waiter-", i)) != 1 {
				return fmt.Errorf("waiter-%d is not running yet", i)
			}
		}
		return nil
	})
	register(t, ctx, r, "tool", tool(`{"n":"tool"}`))
	if p := await(t, r, "tool"); p.Status() != processes.Completed {
		t.Fatalf("the tool process with three waiters running: %s", p.Status())
	}
	reg := tool(`{"n":3}`)
	reg.Label = "waits"
	register(t, ctx, r, "waiter-3", reg)
	// Looked at in the order registered: once a later process of the other
	// class ended, the fourth waiter was turned away.
	register(t, ctx, r, "tool-2", tool(`{"n":"tool-2"}`))
	if p := await(t, r, "tool-2"); p.Status() != processes.Completed {
		t.Fatalf("the second tool process: %s", p.Status())
	}
	if x.runs("waiter-3") != 0 {
		t.Fatal("a fourth waiter ran with its class's three slots taken")
	}
	release <- struct{}{} // one waiter ends; the fourth takes its slot
	testenv.WaitFor(t, 10*time.Second, func() error {
		if x.runs("waiter-3") != 1 {
			return fmt.Errorf("the fourth waiter is not running yet")
		}
		return nil
	})
}

// testWatchRunners: a worker that sweeps once an hour still takes over at
// once the work of a runner proved dead after it caught up: a runner on
// this host whose PID is gone (rerunnable work runs again), one whose
// node's liveness is gone (owner-bound work is abandoned).
func testWatchRunners(t *testing.T, env conformance.Env) {
	ctx := testCtx(t)
	d := conformance.Open(t, env)
	r := processes.New(d.Client(), "client")
	x := &executor{fn: func(ctx context.Context, run *processes.Run) (json.RawMessage, error) {
		return json.RawMessage(`"ran"`), nil
	}}
	c := d.Reopen(t)
	wctx, cancel := context.WithCancel(context.Background())
	w := processes.NewWorker(processes.WorkerConfig{Registry: processes.New(c, "watcher"), Leases: holder(t, ctx, c, "watcher"), Store: c, Executor: x,
		Sweep: time.Hour, Watch: 100 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { cancel(); <-done }()
	// Caught up, with its one sweep done: a process registered now runs.
	register(t, ctx, r, "first", tool(`{"n":0}`))
	if p := await(t, r, "first"); p.Status() != processes.Completed {
		t.Fatalf("first: %s", p.Status())
	}

	local := leases.LocalOwner("gone-pid")
	if local.Host == "" || local.Boot == "" {
		t.Skip("no boot id or host name on this system: PIDs cannot be compared")
	}
	// A runner on this host: a child process, alive until it is killed.
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Skipf("cannot run a child process: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	defer func() { _ = child.Process.Kill(); <-exited }()
	local.PID = child.Process.Pid
	gonePID := leases.New(d.Client(), local)
	if err := gonePID.Beat(ctx, longTTL); err != nil { // only the PID shows death
		t.Fatal(err)
	}
	far := leases.New(d.Client(), leases.Owner{ID: "far-node", Incarnation: "i1", Host: "elsewhere"})
	if err := far.Beat(ctx, longTTL); err != nil {
		t.Fatal(err)
	}
	// The runners register and start in one write while alive: the worker
	// leaves their work to them. Then they die.
	own := func(m *leases.Manager, id string, reg processes.Registration) {
		t.Helper()
		if _, _, created, err := r.RegisterStarted(ctx, id, reg, m.Owner()); err != nil || !created {
			t.Fatalf("RegisterStarted(%s) = created %v, %v", id, created, err)
		}
	}
	bound := tool(`{"n":1}`)
	bound.Disposition = processes.OwnerBound
	own(gonePID, "rerun-gone-pid", tool(`{"n":2}`))
	own(far, "bound-far", bound)
	for _, id := range []string{"rerun-gone-pid", "bound-far"} {
		if p, err := r.Get(ctx, id); err != nil || p.Ended() || x.runs(id) != 0 {
			t.Fatalf("%s before its runner died: %+v, %v, run %d times", id, p, err, x.runs(id))
		}
	}
	_ = child.Process.Kill()
	<-exited
	key, _ := leases.Key("node", "far-node")
	e, err := d.Client().KVGet(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client().KVDelete(ctx, key, e.Revision); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]processes.Status{"rerun-gone-pid": processes.Completed, "bound-far": processes.Abandoned} {
		if p := await(t, r, id); p.Status() != want {
			t.Fatalf("%s: %s %s; want %s, though no sweep came", id, p.Status(), p.End.Data, want)
		}
	}
}
