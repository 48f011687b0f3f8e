package lash

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/effectlog"
	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
)

// processTools appends every run to a file, so runs in another process
// are counted too. Pune blocks in the worker process until it is killed.
func processTools(t testing.TB, runs string, blockPune bool) *tools.Registry {
	reg := tools.New()
	tool, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a weatherArgs) (string, error) {
		f, err := os.OpenFile(runs, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return "", err
		}
		fmt.Fprintln(f, a.City)
		f.Close()
		if blockPune && a.City == "Pune" {
			<-ctx.Done() // the process is killed long before
		}
		return map[string]string{"Oslo": "2C snow", "Lima": "18C grey", "Pune": "33C sun"}[a.City], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reg.Register(tool)
	return reg
}

// TestWorkerProcess is the worker when the test binary runs itself as a
// separate process; otherwise it does nothing.
func TestWorkerProcess(t *testing.T) {
	if os.Getenv("LASH_TEST_WORKER") == "" {
		t.Skip("runs only as the worker process of TestSIGKILLMidTurn")
	}
	ctx := context.Background()
	nc, err := nats.Connect(os.Getenv("LASH_TEST_NATS"))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := openai.New(openai.Config{BaseURL: os.Getenv("LASH_TEST_MODEL"), Model: "scripted"})
	n, err := Open(ctx, WithConn(nc), WithNodeID("worker-process"), WithModel(client), WithLeaseTTL(2*time.Second),
		WithTools(processTools(t, os.Getenv("LASH_TEST_RUNS"), true)), WithToolTimeout(time.Hour),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithMachine(turn.Config{Model: "scripted", System: "You are a weather agent."}))
	if err != nil {
		t.Fatal(err)
	}
	n.Session("s1").Run(ctx) // killed in the middle
}

// A real worker process is killed with SIGKILL in the middle of a turn's
// tool batch; a second worker finishes the turn. Recorded work is not done
// again; the killed tool call runs again, told it is in doubt.
func TestSIGKILLMidTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	srv := testenv.RunJetStream(t)
	r := &rig{t: t, ctx: context.Background(), conn: func() *nats.Conn { return srv.Conn(t) }, replicas: 1,
		models: testenv.RunModelServer(t, scripted.MustParse(weatherScript)), runs: &counter{runs: map[string]int{}}}
	runs := filepath.Join(t.TempDir(), "runs")
	n := r.node("second", WithTools(processTools(t, runs, false)))
	if _, _, err := n.Session("s1").Send(r.ctx, "k1", Input{Text: "Weather in Oslo, Lima and Pune?"}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "LASH_TEST_WORKER=1", "LASH_TEST_NATS="+srv.URL(),
		"LASH_TEST_MODEL="+r.models.URL(), "LASH_TEST_RUNS="+runs)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the worker is inside the Pune call, with Oslo and Lima
	// recorded, then kill it.
	key := turn.ReplayKey{Session: "s1", Turn: "in-1", Iteration: 1, Kind: turn.KindToolCall, Effect: 3}
	j := effectlog.New(n.Streams())
	testenv.WaitFor(t, 30*time.Second, func() error {
		for _, call := range []string{"call_1", "call_2"} {
			k := key
			k.Call = call
			if recs, err := j.Load(r.ctx, "s1", "in-1"); err != nil || !hasRecord(recs, k) {
				return fmt.Errorf("%s not recorded yet (%v)", call, err)
			}
		}
		if data, _ := os.ReadFile(runs); !strings.Contains(string(data), "Pune") {
			return fmt.Errorf("Pune not started yet\n%s", out.String())
		}
		return nil
	})
	// The model's answer stands for the intents of the calls it asked for.
	k := key
	k.Call = "call_3"
	if doubt, err := j.InDoubt(r.ctx, k); err != nil || !doubt {
		t.Fatalf("Pune started and not recorded, yet in doubt %v (%v)", doubt, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	var res []TurnResult
	testenv.WaitFor(t, 30*time.Second, func() error {
		more, err := n.Session("s1").Run(r.ctx)
		res = append(res, more...)
		return err
	})
	if len(res) != 1 || res[0].Outcome.Termination.Reason != turn.NaturalEnd {
		t.Fatalf("results %+v", res)
	}
	data, _ := os.ReadFile(runs)
	got := strings.Fields(string(data))
	count := map[string]int{}
	for _, c := range got {
		count[c]++
	}
	if count["Oslo"] != 1 || count["Lima"] != 1 || count["Pune"] != 2 {
		t.Fatalf("tool runs %v: Oslo and Lima once, Pune twice (killed, then in doubt)", count)
	}
	for _, h := range r.models.Seen() {
		if c := r.models.Count(h.Hash); c != 1 {
			t.Errorf("model request %q made %d times", h.Summary, c)
		}
	}
}

func hasRecord(recs []*effectlog.Record, k turn.ReplayKey) bool {
	for _, r := range recs {
		if r.Key == k {
			return true
		}
	}
	return false
}
