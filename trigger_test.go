package lash

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/triggers"
	"github.com/nats-io/nats.go"
)

const triggerScript = `
rule told
  when notice contains [process
  say noted
`

// handleTools has one tool, "handle", that appends the delivery it ran
// for to a file, so runs in other processes count too.
func handleTools(t testing.TB, runs string) *tools.Registry {
	reg := tools.New()
	tool, err := tools.Func("handle", "handle a deploy event", func(ctx context.Context, a struct {
		Env   string `json:"env"`
		Event struct {
			Occurrence string `json:"occurrence"`
			Subject    string `json:"subject"`
			Payload    any    `json:"payload"`
		} `json:"event"`
	}) (string, error) {
		f, err := os.OpenFile(runs, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return "", err
		}
		defer f.Close()
		fmt.Fprintf(f, "%s %s\n", a.Env, a.Event.Occurrence)
		return "handled " + a.Env, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	return reg
}

// triggerNode serves, wakes and runs processes.
func triggerNode(t *testing.T, r *rig, id, runs string, extra ...Option) *Node {
	t.Helper()
	n := r.node(id, append([]Option{WithTools(handleTools(t, runs)), WithProjection(t.TempDir())}, extra...)...)
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 3)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	go func() { n.RunProcesses(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })
	return n
}

// subscribe registers host subscriptions on deploy signals: three that
// match "deploy.42.done" (one waking session "ops") and one that does not.
func subscribe(t *testing.T, ctx context.Context, tr *triggers.Triggers) {
	t.Helper()
	for _, s := range []struct{ key, pat, env, wake string }{
		{"all", ">", "staging", ""}, {"42", "42.*", "prod", "ops"}, {"done", "*.done", "audit", ""}, {"43", "43.*", "never", ""}} {
		spec := &triggers.Spec{SourceType: "deploy", SourceKey: s.pat, WakeTarget: s.wake,
			Start: triggers.Target{Kind: processes.ToolCall, Tool: "handle", Args: json.RawMessage(`{"env":"` + s.env + `"}`)}}
		if _, err := tr.Apply(ctx, triggers.Op{ID: "reg-" + s.key, Action: triggers.ActRegister, Owner: triggers.Owner{Kind: triggers.Host}, Key: s.key, Spec: spec}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func readRuns(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	lines := strings.Fields(strings.ReplaceAll(string(b), " ", "/"))
	slices.Sort(lines)
	return lines
}

// waitProcesses waits until n processes have completed and no other is
// registered.
func waitProcesses(t *testing.T, ctx context.Context, reg *processes.Registry, n int) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, func() error {
		ps, _, err := reg.List(ctx)
		if err != nil {
			return err
		}
		done := 0
		for _, p := range ps {
			if p.Status() == processes.Completed {
				done++
			}
		}
		if len(ps) != n || done != n {
			var st []string
			for _, p := range ps {
				st = append(st, string(p.Status()))
				if p.End != nil {
					st = append(st, string(p.End.Data))
				}
			}
			return fmt.Errorf("%d processes, %d completed; want %d (%v)", len(ps), done, n, st)
		}
		return nil
	})
}

// A signal published on NATS starts one process per matching
// subscription; the one with a wake target tells that session when it
// ends. The same signal again (same Nats-Msg-Id) starts nothing more.
func TestSignalStartsSubscriptions(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(triggerScript))
	runs := filepath.Join(t.TempDir(), "runs")
	n := triggerNode(t, r, "a", runs)
	ctx := r.ctx
	subscribe(t, ctx, n.Triggers())
	subj := n.Streams().Subjects().Signals()
	subj = strings.TrimSuffix(subj, ">") + "deploy.42.done"
	nc := r.conn()
	msg := &nats.Msg{Subject: subj, Data: []byte(`{"build":7}`), Header: nats.Header{"Nats-Msg-Id": []string{"deploy-7"}}}
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	waitProcesses(t, ctx, n.Processes(), 3)
	got := readRuns(t, runs)
	occ := triggers.OccurrenceID("deploy", "42.done", "deploy-7")
	want := []string{"audit/" + occ, "prod/" + occ, "staging/" + occ}
	if !slices.Equal(got, want) {
		t.Fatalf("tool runs %v, want %v", got, want)
	}
	// The wake target is told, once, under the process's wake key.
	o, err := n.Triggers().Occurrence(ctx, occ)
	if err != nil || len(o.Deliveries) != 3 {
		t.Fatalf("occurrence %+v, %v", o, err)
	}
	var woken string
	for _, id := range o.Deliveries {
		d, err := n.Triggers().Delivery(ctx, id)
		if err != nil || !d.Started {
			t.Fatalf("delivery %s: %+v %v", id, d, err)
		}
		if d.Registration.WakeTarget == "ops" {
			woken = d.Process
		}
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		if _, ok, err := n.Projection().InputKey("ops", processWakeKey(woken)); err != nil || !ok {
			return fmt.Errorf("session ops not told of %s yet (%v)", woken, err)
		}
		return nil
	})
	// The same signal again is deduped; another is a new occurrence.
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	sig2 := &nats.Msg{Subject: subj, Data: []byte(`{"build":8}`), Header: nats.Header{"Nats-Msg-Id": []string{"deploy-8"}}}
	if err := nc.PublishMsg(sig2); err != nil {
		t.Fatal(err)
	}
	waitProcesses(t, ctx, n.Processes(), 6)
	if got := readRuns(t, runs); len(got) != 6 {
		t.Fatalf("tool runs after the same signal and a new one: %v", got)
	}
}

// TestReserveThenDie is a node that reserves a signal's deliveries and is
// killed (SIGKILL) before it registers any process, when the test binary
// runs itself as a separate process; otherwise it does nothing.
func TestReserveThenDie(t *testing.T) {
	if os.Getenv("LASH_TEST_RESERVE_THEN_DIE") == "" {
		t.Skip("runs only as the dying node of TestSIGKILLBetweenReserveAndStart")
	}
	r := childRig(t, triggerScript)
	n := r.node("dying", WithTools(handleTools(t, os.Getenv("LASH_TEST_RUNS"))), WithProjection(t.TempDir()),
		withRouter(func(c *triggers.RouterConfig) {
			c.AfterReserve = func(*triggers.Occurrence) { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		}))
	n.Wake(r.ctx) // killed on the first signal
}

// The node delivering a signal is killed between reserving its three
// deliveries and registering their processes: another node's sweep
// starts each once.
func TestSIGKILLBetweenReserveAndStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	srv := testenv.RunJetStream(t)
	r := &rig{t: t, ctx: context.Background(), conn: func() *nats.Conn { return srv.Conn(t) }, replicas: 1,
		models: testenv.RunModelServer(t, scripted.MustParse(triggerScript)), runs: &counter{runs: map[string]int{}}}
	runs := filepath.Join(t.TempDir(), "runs")
	admin := r.node("admin")
	ctx := r.ctx
	subscribe(t, ctx, admin.Triggers())
	cmd := exec.Command(os.Args[0], "-test.run=^TestReserveThenDie$")
	cmd.Env = append(os.Environ(), "LASH_TEST_RESERVE_THEN_DIE=1", "LASH_TEST_NATS="+srv.URL(), "LASH_TEST_RUNS="+runs)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The dying node's waker takes the signal once its consumer exists.
	subj := strings.TrimSuffix(admin.Streams().Subjects().Signals(), ">") + "deploy.42.done"
	testenv.WaitFor(t, 20*time.Second, func() error {
		c, err := admin.Streams().Conn().Request("$JS.API.CONSUMER.INFO."+admin.Streams().StreamName(streams.Triggers)+"."+signalConsumer, nil, time.Second)
		if err != nil || strings.Contains(string(c.Data), `"error"`) {
			return fmt.Errorf("the dying node's signal consumer is not there yet (%v)", err)
		}
		return nil
	})
	if _, _, err := admin.Streams().Publish(ctx, streams.Publication{Subject: subj, Data: []byte(`{"build":9}`), MsgID: "deploy-9"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if !killedBySIGKILL(cmd) {
			t.Fatalf("the node exited otherwise (%v):\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the node was never killed:\n%s", out.String())
	}
	occ := triggers.OccurrenceID("deploy", "42.done", "deploy-9")
	o, err := admin.Triggers().Occurrence(ctx, occ)
	if err != nil || len(o.Deliveries) != 3 {
		t.Fatalf("occurrence after the kill: %+v, %v", o, err)
	}
	if ps, _, err := admin.Processes().List(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("processes before the sweep: %d, %v", len(ps), err)
	}
	live := triggerNode(t, r, "live", runs, withRouter(func(c *triggers.RouterConfig) {
		c.SweepEvery, c.SweepAfter = 100*time.Millisecond, 100*time.Millisecond
	}))
	waitProcesses(t, ctx, live.Processes(), 3)
	want := []string{"audit/" + occ, "prod/" + occ, "staging/" + occ}
	if got := readRuns(t, runs); !slices.Equal(got, want) {
		t.Fatalf("tool runs %v, want %v", got, want)
	}
	// The killed node never acknowledged the signal: JetStream redelivers
	// it (after the consumer's ack wait) to the live node, which records
	// nothing new and starts nothing more.
	testenv.WaitFor(t, 90*time.Second, func() error {
		m, err := live.Streams().Conn().Request("$JS.API.CONSUMER.INFO."+live.Streams().StreamName(streams.Triggers)+"."+signalConsumer, nil, time.Second)
		if err != nil {
			return err
		}
		var info struct {
			NumAckPending uint64 `json:"num_ack_pending"`
			Delivered     struct {
				Consumer uint64 `json:"consumer_seq"`
			} `json:"delivered"`
		}
		if err := json.Unmarshal(m.Data, &info); err != nil {
			return err
		}
		// One signal on the stream: a second delivery is its redelivery.
		if info.NumAckPending != 0 || info.Delivered.Consumer < 2 {
			return fmt.Errorf("signal not redelivered and acknowledged yet (%d unacknowledged, %d deliveries)", info.NumAckPending, info.Delivered.Consumer)
		}
		return nil
	})
	waitProcesses(t, ctx, live.Processes(), 3)
	if got := readRuns(t, runs); !slices.Equal(got, want) {
		t.Fatalf("tool runs after the redelivery %v, want %v", got, want)
	}
}

// runNode serves, wakes and runs processes until stop is called.
func runNode(t *testing.T, r *rig, id, runs string, extra ...Option) (n *Node, stop func()) {
	t.Helper()
	n = r.node(id, append([]Option{WithTools(handleTools(t, runs)), WithProjection(t.TempDir())}, extra...)...)
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 3)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	go func() { n.RunProcesses(ctx); done <- struct{}{} }()
	var once bool
	stop = func() {
		if !once {
			once = true
			cancel()
			<-done
			<-done
			<-done
			n.Close(context.Background())
		}
	}
	t.Cleanup(stop)
	return n, stop
}

// A schedule fires every second with three nodes running, one of them
// restarted meanwhile: every tick is one occurrence, delivered once.
func TestScheduleTicksOnce(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(triggerScript))
	runs := filepath.Join(t.TempDir(), "runs")
	a, _ := runNode(t, r, "a", runs)
	_, stopB := runNode(t, r, "b", runs)
	runNode(t, r, "c", runs)
	ctx := r.ctx
	spec := &triggers.Spec{SourceType: triggers.CronSource, SourceKey: "heartbeat",
		Start: triggers.Target{Kind: processes.ToolCall, Tool: "handle", Args: json.RawMessage(`{"env":"tick"}`)}}
	if _, err := a.Triggers().Apply(ctx, triggers.Op{ID: "reg", Action: triggers.ActRegister, Owner: triggers.Owner{Kind: triggers.Host}, Key: "beat", Spec: spec}, nil); err != nil {
		t.Fatal(err)
	}
	if err := triggers.SetSchedule(ctx, a.Streams(), "heartbeat", "@every 1s"); err != nil {
		t.Fatal(err)
	}
	ticks := func(n int) {
		testenv.WaitFor(t, 30*time.Second, func() error {
			if got := len(readRuns(t, runs)); got < n {
				return fmt.Errorf("%d ticks handled, want %d", got, n)
			}
			return nil
		})
	}
	ticks(3)
	stopB()
	runNode(t, r, "b", runs)
	ticks(6)
	if err := triggers.RemoveSchedule(ctx, a.Streams(), "heartbeat"); err != nil {
		t.Fatal(err)
	}
	timersSettled(t, a)
	// Every tick fired became one signal (its fired message, handled, is
	// gone), one occurrence with one delivery, and ran once.
	var fired int
	testenv.WaitFor(t, 30*time.Second, func() error {
		left := 0
		if err := a.Streams().Read(ctx, "lash.timer.due.cron.heartbeat._", 0, func(*streams.Msg) error { left++; return nil }); err != nil {
			return err
		}
		if left != 0 {
			return fmt.Errorf("%d fired ticks not removed", left)
		}
		return nil
	})
	if err := a.Streams().Read(ctx, "lash.signal.cron.heartbeat", 0, func(*streams.Msg) error { fired++; return nil }); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		occs, err := a.Triggers().Occurrences(ctx, 0, 0)
		if err != nil {
			return err
		}
		if len(occs) != fired {
			return fmt.Errorf("%d occurrences for %d ticks", len(occs), fired)
		}
		for _, o := range occs {
			if len(o.Deliveries) != 1 {
				return fmt.Errorf("occurrence %s has %d deliveries", o.ID, len(o.Deliveries))
			}
		}
		if got := readRuns(t, runs); len(got) != fired || len(slices.Compact(got)) != fired {
			return fmt.Errorf("%d runs (%d distinct) for %d ticks", len(got), len(slices.Compact(got)), fired)
		}
		return nil
	})
}

// childRig is the rig of a node the test binary runs as a process of its
// own: it joins the server at LASH_TEST_NATS.
func childRig(t *testing.T, script string) *rig {
	r := &rig{t: t, ctx: context.Background(), replicas: 1, runs: &counter{runs: map[string]int{}},
		conn: func() *nats.Conn {
			nc, err := nats.Connect(os.Getenv("LASH_TEST_NATS"))
			if err != nil {
				t.Fatal(err)
			}
			return nc
		}}
	r.models = testenv.RunModelServer(t, scripted.MustParse(script))
	return r
}

// killedBySIGKILL reports whether a finished command died of SIGKILL.
func killedBySIGKILL(cmd *exec.Cmd) bool {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// A delivery whose process cannot start (its input, the subscription's
// fixed arguments with the signal, over a process's bound) is recorded
// failed, and keeps none of the occurrence's other deliveries waiting for
// the sweep: they start with it.
func TestDeliveryThatCannotStartHoldsNoOther(t *testing.T) {
	r := newRig(t)
	n := r.node("a", WithTools(handleTools(t, filepath.Join(t.TempDir(), "runs"))), WithProjection(t.TempDir()))
	ctx := r.ctx
	// The router keeps the subscriptions (the waker runs it); no signal
	// consumer runs, so this test's deliver is the signal's first.
	wctx, stop := context.WithCancel(ctx)
	routed := make(chan struct{})
	go func() { _ = n.router.Run(wctx); close(routed) }()
	t.Cleanup(func() { stop(); <-routed })
	host := triggers.Owner{Kind: triggers.Host}
	// The one that fails comes first in the occurrence's order.
	good, bad := "small", ""
	for i := 0; bad == ""; i++ {
		if k := fmt.Sprint("large-", i); triggers.SubscriptionID(host, k) < triggers.SubscriptionID(host, good) {
			bad = k
		}
	}
	for key, env := range map[string]string{good: "small", bad: strings.Repeat("e", 15<<10)} {
		spec := &triggers.Spec{SourceType: "big", Start: triggers.Target{Kind: processes.ToolCall, Tool: "handle", Args: json.RawMessage(`{"env":"` + env + `"}`)}}
		if _, err := n.Triggers().Apply(ctx, triggers.Op{ID: "reg-" + key, Action: triggers.ActRegister, Owner: host, Key: key, Spec: spec}, nil); err != nil {
			t.Fatal(err)
		}
	}
	payload := `"` + strings.Repeat("a", 55<<10) + `"`
	if _, _, err := n.Streams().Publish(ctx, streams.Publication{Subject: "lash.signal.big", Data: []byte(payload), MsgID: "big-1"}); err != nil {
		t.Fatal(err)
	}
	m, err := n.Streams().Head(ctx, "lash.signal.big")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.deliver(ctx, m); err != nil {
		t.Fatalf("deliver: %v; want the refused delivery recorded, not retried", err)
	}
	o, err := n.Triggers().Occurrence(ctx, triggers.OccurrenceID("big", "", "big-1"))
	if err != nil || len(o.Deliveries) != 2 {
		t.Fatalf("occurrence %+v, %v", o, err)
	}
	for _, id := range o.Deliveries {
		d, err := n.Triggers().Delivery(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch d.Subscription {
		case triggers.SubscriptionID(host, good):
			if !d.Started || d.Failed != "" {
				t.Fatalf("the delivery that fits: started %v, failed %q; want it started with the other", d.Started, d.Failed)
			}
		default:
			if d.Started || d.Failed == "" {
				t.Fatalf("the delivery over the bound: started %v, failed %q; want it recorded failed", d.Started, d.Failed)
			}
		}
	}
}
