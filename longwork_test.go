package lash

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/lash-run/lash/triggers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// longestDefault is the longest deadline on the path of background work by
// default, short of the tool's own timeout: a request to the streams, a
// lease's life, a tool server's return after a restart.
func longestDefault() time.Duration {
	return max(streams.DefaultTimeout, DefaultLeaseTTL, natstool.NoServerWait)
}

// invocations counts a tool's runs per idempotency key.
type invocations struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *invocations) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[key]++
}

func (c *invocations) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.runs {
		out[k] = v
	}
	return out
}

// serveSlow serves the tool "slow" over NATS from two instances (an
// instance runs one call at a time): each call takes d.
func serveSlow(t *testing.T, r *rig, d time.Duration, calls *invocations) {
	t.Helper()
	for i := range 2 {
		svc, err := natstool.Serve(r.conn(), "lash", micro.Config{Name: "slow", Version: "1.0.0"}, natstool.Served{
			Name: "slow", Description: "takes its time", Schema: json.RawMessage(`{"type":"object"}`),
			Handle: func(ctx context.Context, req natstool.Request) (string, error) {
				calls.add(req.IdempotencyKey)
				select {
				case <-time.After(d): // the work itself
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return fmt.Sprintf("done by instance %d", i), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
	}
}

// A background process and a trigger delivery whose tool takes twice the
// longest default deadline on their path each run the tool once and end
// completed; a hung tool's process ends failed once, at the tool's timeout;
// and with twenty processes hung on one tool, a process of another tool
// starts and ends while they still hang.
func TestLongBackgroundWork(t *testing.T) {
	if testing.Short() {
		t.Skip("runs background work for twice the longest default deadline")
	}
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(triggerScript))
	long := 2 * longestDefault()
	var calls invocations
	serveSlow(t, r, long, &calls)
	found, err := natstool.Discover(r.ctx, r.conn(), "lash")
	if err != nil || len(found) != 1 {
		t.Fatalf("discovered %d tools, %v", len(found), err)
	}
	reg := tools.New()
	var hung sync.WaitGroup
	stuck := func(name string, timeout time.Duration) tools.Tool {
		tool, err := tools.Func(name, "never answers", func(ctx context.Context, _ struct{}) (string, error) {
			hung.Add(1)
			defer hung.Done()
			<-ctx.Done()
			return "", ctx.Err()
		}, tools.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
	quick, err := tools.Func("quick", "answers at once", func(ctx context.Context, _ struct{}) (string, error) { return "quick", nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []tools.Tool{found[0], stuck("hang", 2*time.Second), stuck("stuck", time.Hour), quick} {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	// The lease's TTL and the tool timeout of a deployment's defaults; the
	// slow tool declares none, so the node's default must outlast it.
	n := r.node("a", WithTools(reg), WithProjection(t.TempDir()), WithLeaseTTL(DefaultLeaseTTL), WithToolTimeout(2*long))
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{}, 3)
	go func() { n.Serve(ctx); done <- struct{}{} }()
	go func() { n.Wake(ctx); done <- struct{}{} }()
	go func() { n.RunProcesses(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })
	procs := n.Processes()
	start := func(id, tool string) {
		t.Helper()
		_, _, err := procs.Register(ctx, id, processes.Registration{Input: processes.Input{Kind: processes.ToolCall, Tool: tool, Args: json.RawMessage(`{}`)},
			Disposition: processes.Rerunnable, Provenance: processes.Provenance{Host: "test"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	await := func(id string, within time.Duration) *processes.Process {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		p, err := procs.Await(actx, id)
		if err != nil {
			t.Fatalf("await %s: %v", id, err)
		}
		return p
	}

	// The slow tool, as a process and as a trigger's delivery.
	start("slow-bg", "slow")
	spec := &triggers.Spec{SourceType: "deploy", SourceKey: ">", Start: triggers.Target{Kind: processes.ToolCall, Tool: "slow", Args: json.RawMessage(`{}`)}}
	if _, err := n.Triggers().Apply(ctx, triggers.Op{ID: "reg-slow", Action: triggers.ActRegister, Owner: triggers.Owner{Kind: triggers.Host}, Key: "slow", Spec: spec}, nil); err != nil {
		t.Fatal(err)
	}
	subj := strings.TrimSuffix(n.Streams().Subjects().Signals(), ">") + "deploy.7"
	if err := r.conn().PublishMsg(&nats.Msg{Subject: subj, Data: []byte(`{}`), Header: nats.Header{"Nats-Msg-Id": []string{"deploy-7"}}}); err != nil {
		t.Fatal(err)
	}

	// Meanwhile: a hung tool ends failed at its timeout, once.
	start("hang-bg", "hang")
	p := await("hang-bg", time.Minute)
	var f processes.Failure
	if p.Status() != processes.Failed || json.Unmarshal(p.End.Data, &f) != nil || !strings.Contains(f.Message, "timed out") || p.Attempts() != 1 {
		t.Fatalf("the hung tool's process: %s %s after %d attempts; want failed for its timeout, once", p.Status(), p.End.Data, p.Attempts())
	}
	// Twenty processes hang on one tool; one of another tool runs at once.
	for i := range 20 {
		start(fmt.Sprint("stuck-", i), "stuck")
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if got := n.Processes(); got == nil {
			return fmt.Errorf("no registry")
		}
		running := 0
		for i := range 20 {
			q, err := procs.Get(ctx, fmt.Sprint("stuck-", i))
			if err != nil {
				return err
			}
			if q.Status() == processes.Running {
				running++
			}
		}
		if running < 16 {
			return fmt.Errorf("%d of the stuck processes running, want the tool's 16 slots taken", running)
		}
		return nil
	})
	start("quick-bg", "quick")
	if p := await("quick-bg", 30*time.Second); p.Status() != processes.Completed {
		t.Fatalf("the quick process with twenty hung: %s %s", p.Status(), p.End.Data)
	}
	for i := range 20 {
		q, err := procs.Get(ctx, fmt.Sprint("stuck-", i))
		if err != nil || q.Ended() {
			t.Fatalf("stuck-%d ended (%v) before the quick one was done: the test shows nothing", i, err)
		}
	}

	// The slow ones end completed, each having run its tool once.
	bg := await("slow-bg", 3*long)
	if bg.Status() != processes.Completed || bg.Attempts() != 1 {
		t.Fatalf("slow-bg: %s %s after %d attempts; want completed by its first", bg.Status(), bg.End.Data, bg.Attempts())
	}
	occ, err := n.Triggers().Occurrence(ctx, triggers.OccurrenceID("deploy", "7", "deploy-7"))
	if err != nil || len(occ.Deliveries) != 1 {
		t.Fatalf("occurrence %+v, %v", occ, err)
	}
	dl, err := n.Triggers().Delivery(ctx, occ.Deliveries[0])
	if err != nil {
		t.Fatal(err)
	}
	dp := await(dl.Process, 3*long)
	if dp.Status() != processes.Completed || dp.Attempts() != 1 {
		t.Fatalf("the delivery's process: %s %s after %d attempts; want completed by its first", dp.Status(), dp.End.Data, dp.Attempts())
	}
	runs := calls.snapshot()
	if len(runs) != 2 {
		t.Fatalf("the slow tool ran for %d keys, want 2: %v", len(runs), runs)
	}
	for key, n := range runs {
		if n != 1 {
			t.Fatalf("the slow tool ran %d times for %s, want once: %v", n, key, runs)
		}
	}
}
