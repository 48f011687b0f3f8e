package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is one chaos run.
type Config struct {
	Seed uint64
	// Length is how long faults are injected while the workload runs;
	// then everything heals and the sessions started finish.
	Length time.Duration
	// Parallel is how many sessions run at once (default 12).
	Parallel int
	// LeaseTTL is the nodes' lease TTL (default 2s).
	LeaseTTL time.Duration
	// SessionTimeout bounds one session, faults included (default 4m).
	SessionTimeout time.Duration
	// NodeArgs are more flags of every node.
	NodeArgs []string
	// Kinds, if set, are the only fault kinds the schedule injects.
	Kinds []FaultKind
	// BreakTags, for a check of the check, builds the nodes with these
	// build tags, each removing a guard (BrokenNode).
	BreakTags string
	// NoInputKeys, for a check of the check, has clients publish inputs
	// without idempotency keys, as a careless client would.
	NoInputKeys bool
	// ModelDelay is how long each model answer takes (default none): a
	// slower model keeps more turns in flight when a fault strikes.
	ModelDelay time.Duration
	// AckTimeout is how long a client waits for a publish's
	// acknowledgement before it publishes again (default 2s).
	AckTimeout time.Duration
}

// AppliedStep is a step as it ran.
type AppliedStep struct {
	Step
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Notes say what the step found: the server a KillServer picked.
	Notes []string `json:"notes,omitempty"`
}

// Report is what a run did and found.
type Report struct {
	Seed     uint64        `json:"seed"`
	Length   time.Duration `json:"length"`
	Steps    []AppliedStep `json:"steps"`
	Verdict  *Verdict      `json:"verdict"`
	Figures  Figures       `json:"figures"`
	Restarts []string      `json:"restarts,omitempty"`
	Took     time.Duration `json:"took"`
}

// Run starts a fleet, runs the workload under the seeded schedule of
// faults, heals everything, waits for the sessions to finish and checks
// the history. It fails t only when the harness itself cannot run; the
// verdict's violations are for the caller to judge.
func Run(t testing.TB, cfg Config) *Report {
	t.Helper()
	if cfg.Parallel == 0 {
		cfg.Parallel = 12
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 4 * time.Minute
	}
	began := time.Now()
	models := testenv.RunModelServer(t, scripted.MustParse(slowed(Script, cfg.ModelDelay)))
	args := append([]string{"--model", "chaos", "--base-url", models.URL(), "--lease-ttl", cfg.LeaseTTL.String(),
		"--tool-refresh", "500ms", "--tool-timeout", "10s", "--model-timeout", "20s"}, cfg.NodeArgs...)
	fc := FleetConfig{Seed: cfg.Seed, NodeEnv: []string{"OPENAI_API_KEY=chaos"}, NodeArgs: args}
	if cfg.BreakTags != "" {
		fc.NodeBinary = BrokenNode(t, cfg.BreakTags)
	}
	f := StartFleet(t, fc)
	// The fleet's directory goes with the test: on a failure its
	// processes' last lines are logged first.
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range append(f.Servers, f.Nodes...) {
				t.Logf("chaos: the last lines of %s:\n%s", p.Name, p.Tail(40))
			}
		}
	})
	nc, err := nats.Connect(f.URLs(), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f.WaitCluster(t, nc)
	counter, err := ServeCounter(nc)
	if err != nil {
		t.Fatal(err)
	}
	// One at a time: nodes that create a deployment's streams together
	// race for them (each then retries, or exits for its supervisor).
	for _, n := range f.Nodes {
		n.Start(t)
		n.WaitLine(t, "lash-node running", 60*time.Second)
	}
	if _, err := f.Admin("triggers", "register", "chaosjobs", "--source", "chaosjob.>", "--tool", "count", "--args", `{"tag":"trigger"}`); err != nil {
		t.Fatal(err)
	}
	c, err := streams.Open(t.Context(), nc, streams.Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Sign(t.Context(), f.Secret()); err != nil {
		t.Fatal(err)
	}
	insp := lash.NewInspector(c)
	// The clients reach the servers through links of their own, which
	// the link and server faults hit too.
	cc, err := nats.Connect(f.ClientURLs(), nats.IgnoreDiscoveredServers(), nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Close)
	w := NewWorkload(cc, insp, cfg.Seed, cfg.SessionTimeout)
	w.NoKeys = cfg.NoInputKeys
	if cfg.AckTimeout > 0 {
		w.AckTimeout = cfg.AckTimeout
	}
	rep := &Report{Seed: cfg.Seed, Length: cfg.Length}

	stop := make(chan struct{})
	var stopOnce sync.Once
	stopAll := func() { stopOnce.Do(func() { close(stop) }) }
	var wg sync.WaitGroup
	// A harness failure mid-schedule must not leave the workload running
	// past the test.
	t.Cleanup(func() { stopAll(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		w.RunUntil(t.Context(), stop, fmt.Sprintf("c%d", cfg.Seed), cfg.Parallel)
	}()
	go func() {
		defer wg.Done()
		for n := 0; !closed(stop); n++ {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			if err := w.Trigger(ctx, n); err != nil {
				t.Errorf("trigger signal %d: %v", n, err)
			}
			cancel()
			select {
			case <-stop:
			case <-t.Context().Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()

	start := time.Now()
	js, _ := jetstream.New(nc)
	for _, step := range Schedule(cfg.Seed, cfg.Length, cfg.LeaseTTL, len(f.Nodes), len(f.Servers), cfg.Kinds...) {
		rep.Restarts = append(rep.Restarts, f.supervise()...)
		time.Sleep(time.Until(start.Add(step.At)))
		applied := AppliedStep{Step: step, Start: time.Now()}
		undo := make([]func(), 0, len(step.Faults))
		for _, flt := range step.Faults {
			u, note := f.inject(t, js, flt)
			undo = append(undo, u)
			if note != "" {
				applied.Notes = append(applied.Notes, note)
			}
		}
		t.Logf("chaos: %s%v", step, applied.Notes)
		time.Sleep(step.Hold)
		for _, u := range slices.Backward(undo) {
			u()
		}
		applied.End = time.Now()
		rep.Steps = append(rep.Steps, applied)
	}
	time.Sleep(time.Until(start.Add(cfg.Length)))
	stopAll()
	f.Heal()
	rep.Restarts = append(rep.Restarts, f.supervise()...)
	// A node that exits after the faults is started again too.
	quiet, supervised := make(chan struct{}), make(chan []string)
	go func() {
		var restarts []string
		for {
			select {
			case <-quiet:
				supervised <- restarts
				return
			case <-time.After(time.Second):
				restarts = append(restarts, f.supervise()...)
			}
		}
	}()
	healed := time.Now()
	wg.Wait()
	t.Logf("chaos: the sessions finished %s after the last heal", time.Since(healed).Round(time.Millisecond))
	waitQuiet(t, w, counter, c)
	close(quiet)
	rep.Restarts = append(rep.Restarts, <-supervised...)
	checking := time.Now()
	var resumes []time.Time
	for _, st := range rep.Steps {
		for _, flt := range st.Faults {
			if flt.Kind == PauseNode {
				resumes = append(resumes, st.End)
			}
		}
	}
	rep.Verdict = Check(t.Context(), History{Client: c, API: nodeapi.NewClient(nc, "lash"), Workload: w,
		Tools: counter.Executions(), Models: models.Seen(), Grace: graceFor(cfg), Resumes: resumes})
	t.Logf("chaos: checked in %s", time.Since(checking).Round(time.Millisecond))
	rep.Figures = figures(rep.Steps, rep.Verdict)
	rep.Took = time.Since(began)
	return rep
}

// graceFor is how late a request may arrive after the outcome of its
// call was recorded: the longest a step holds a link, plus the servers'
// stale-connection detection (3 pings a second apart) and the tool
// timeout, within which a node's NATS client may send what it buffered
// while reconnecting.
func graceFor(cfg Config) time.Duration {
	return cfg.LeaseTTL + 4*time.Second + 3*time.Second + 10*time.Second
}

// waitQuiet waits until every trigger signal has run its tool and every
// process has ended, or a bound passes (the checker then says what is
// missing).
func waitQuiet(t testing.TB, w *Workload, counter *Counter, c *streams.Client) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		// Distinct signals: an attempt run again in doubt must not stand
		// for a signal whose process has not run yet.
		triggered := map[string]bool{}
		for _, e := range counter.Executions() {
			if e.Tag == "trigger" {
				triggered[e.Event] = true
			}
		}
		if len(triggered) >= len(w.Triggered()) && allEnded(t.Context(), c) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// supervise starts again the nodes that exited on their own, as a
// supervisor would, and says which. It may run on any goroutine.
func (f *Fleet) supervise() []string {
	var out []string
	for _, n := range f.Nodes {
		if n.exited() {
			line := fmt.Sprintf("%s exited on its own at %s: %s", n.Name, time.Now().Format(time.TimeOnly), n.Tail(1))
			n.Kill()
			if err := n.start(); err != nil {
				line += "; " + err.Error()
			}
			out = append(out, line)
		}
	}
	return out
}

// inject applies one fault and returns what heals it, and a note.
func (f *Fleet) inject(t testing.TB, js jetstream.JetStream, flt Fault) (undo func(), note string) {
	switch flt.Kind {
	case PartitionNode:
		f.PartitionNode(flt.Node, Both)
		return f.Heal, ""
	case OneWayNode:
		f.PartitionNode(flt.Node, flt.Dir)
		return f.Heal, ""
	case PartitionServer:
		f.PartitionServer(flt.Server, Both)
		f.ClientLinks[flt.Server].Partition(Both)
		return f.Heal, ""
	case SlowLinks:
		for _, p := range append(f.Links[flt.Node], f.ClientLinks[flt.Server]) {
			p.Delay(flt.Delay, flt.Jitter)
		}
		for j := range f.Servers {
			if j != flt.Server {
				f.Routes[flt.Server][j].Delay(flt.Delay, flt.Jitter)
				f.Routes[j][flt.Server].Delay(flt.Delay, flt.Jitter)
			}
		}
		return f.Heal, ""
	case CutLinks:
		var ps []*Proxy
		ps = append(ps, f.Links[flt.Node]...)
		ps = append(ps, f.ClientLinks[flt.Server])
		for j := range f.Servers {
			if j != flt.Server {
				ps = append(ps, f.Routes[flt.Server][j], f.Routes[j][flt.Server])
			}
		}
		// Cut, and refuse new connections while the step holds.
		for _, p := range ps {
			p.Refuse(true)
			p.Cut()
		}
		return f.Heal, ""
	case KillNode:
		n := f.Nodes[flt.Node]
		n.Kill()
		return func() { n.Start(t) }, ""
	case PauseNode:
		n := f.Nodes[flt.Node]
		n.Pause()
		return n.Resume, ""
	case KillServer:
		i := f.streamLeader(js)
		s := f.Servers[i]
		s.Kill()
		return func() { s.Start(t) }, "killed " + s.Name
	}
	t.Fatalf("chaos: unknown fault %q", flt.Kind)
	return nil, ""
}

// streamLeader is the index of the server leading the sessions stream,
// or 0 when no server says.
func (f *Fleet) streamLeader(js jetstream.JetStream) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "LASH_SESSIONS")
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return 0
	}
	for i, s := range f.Servers {
		if s.Name == info.Cluster.Leader {
			return i
		}
	}
	return 0
}

// allEnded reports whether every process has ended.
func allEnded(ctx context.Context, c *streams.Client) bool {
	ps, _, err := processes.New(c, "chaos-checker").List(ctx)
	if err != nil {
		return false
	}
	for _, p := range ps {
		if p.End == nil {
			return false
		}
	}
	return true
}

// slowed adds a delay to the rules that answer after a call: a turn then
// has a recorded call behind it for as long as its last answer takes, and
// a node killed meanwhile leaves recorded work for its successor.
func slowed(script string, d time.Duration) string {
	if d <= 0 {
		return script
	}
	var b strings.Builder
	for _, line := range strings.Split(script, "\n") {
		b.WriteString(line + "\n")
		if strings.HasPrefix(line, "rule ") && strings.HasSuffix(line, "-answer") {
			b.WriteString("  delay " + d.String() + "\n")
		}
	}
	return b.String()
}
