package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/testenv"
)

const programScript = `
rule program
  when tools = 0
  call run_program {"program": "a = t_count(step=1)\nb = t_slow(step=2)\nc = t_count(step=3)\nresult = [a, b, c]"}

default
  say counted
`

// A lash-node killed with SIGKILL while its program's second call runs:
// another node runs the program again from its start. The first call,
// recorded, does not run again; the second, started and not recorded, runs
// again in doubt; the third runs once; the model is asked each thing once.
func TestProgramSIGKILL(t *testing.T) {
	d := newDeployment(t)
	count := serveCount(t, d.url, "t_count", 2, 0)
	gate := make(chan struct{})
	slow := serveGated(t, d.url, "t_slow", 8, 0, gate)
	victim := d.node("victim", programScript, "--mode", "code")
	d.send("p1", "k1", []byte(`{"text":"count"}`))
	testenv.WaitFor(t, 30*time.Second, func() error {
		if begins, _ := slow.calls(); len(begins) == 0 {
			return fmt.Errorf("the slow call has not begun")
		}
		return nil
	})
	victim.kill()
	// The dead node's call may hold the instance of t_slow the next call
	// is handed to: it ends, its answer to no one.
	close(gate)
	d.node("survivor", programScript, "--mode", "code")
	msgs := d.waitAnswer("p1", "counted")
	var results []string
	for _, m := range msgs {
		if m.Role == "tool" {
			results = append(results, m.Text)
		}
	}
	if len(results) != 1 || results[0] != `result: ["ok","ok","ok"]` {
		t.Fatalf("the program's results: %q", results)
	}
	counts, _ := count.calls()
	keys := map[string]int{}
	for _, c := range counts {
		keys[c.key]++
		if c.attempt != 1 || c.inDoubt {
			t.Errorf("t_count %s ran as attempt %d, in doubt %v", c.key, c.attempt, c.inDoubt)
		}
	}
	if len(counts) != 2 || len(keys) != 2 {
		t.Fatalf("t_count ran %d times for %d keys: %v", len(counts), len(keys), keys)
	}
	slows, _ := slow.calls()
	if len(slows) != 2 || slows[0].key != slows[1].key || slows[1].attempt != 2 || !slows[1].inDoubt || !strings.HasSuffix(slows[0].key, "#1") {
		t.Fatalf("t_slow ran %+v: want once, then again in doubt", slows)
	}
}

// A saved program started as a background process (lash-admin programs
// start) survives the SIGKILL of the node running it and completes once:
// its recorded call does not run again, the one running at the kill runs
// again in doubt, and the process ends once, completed, with the program's
// result. A program that requires a tool the deployment lacks is refused
// when it is started.
func TestBackgroundProgramSIGKILL(t *testing.T) {
	d := newDeployment(t)
	count := serveCount(t, d.url, "t_count", 2, 0)
	gate := make(chan struct{})
	slow := serveGated(t, d.url, "t_slow", 8, 0, gate)
	victim := d.node("victim", programScript)
	api := nodeapi.NewClient(d.nc, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var saved struct {
		Version int `json:"version"`
	}
	d.admin(&saved, "programs", "save", "nightly", "--requires", "t_count,t_slow",
		"-f", d.file("nightly.star", "a = t_count(step=1)\nb = t_slow(step=2)\nc = t_count(step=3)\nresult = [a, b, c]\n"))
	d.admin(&saved, "programs", "save", "needs", "--requires", "t_missing", "-f", d.file("needs.star", "t_missing()\n"))
	if err := d.tryAdmin(&struct{}{}, "programs", "start", "needs"); err == nil || !strings.Contains(err.Error(), "requires t_missing") {
		t.Fatalf("a program requiring a tool the deployment lacks: %v", err)
	}
	d.admin(&struct{}{}, "programs", "start", "nightly", "--id", "nightly")
	testenv.WaitFor(t, 30*time.Second, func() error {
		if begins, _ := slow.calls(); len(begins) == 0 {
			return fmt.Errorf("the slow call has not begun")
		}
		return nil
	})
	victim.kill()
	close(gate) // as above
	d.node("survivor", programScript)
	var ps processList
	testenv.WaitFor(t, 30*time.Second, func() error {
		ps = processList{}
		if err := d.tryAdmin(&ps, "processes", "ls"); err != nil {
			return err
		}
		if len(ps.Processes) != 1 || ps.Processes[0].Status != "completed" {
			return fmt.Errorf("processes %+v", ps.Processes)
		}
		return nil
	})
	st, err := api.ProcessStatus(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(st.Outcome), `result: [\"ok\",\"ok\",\"ok\"]`) {
		t.Fatalf("the process's outcome %s", st.Outcome)
	}
	counts, _ := count.calls()
	if len(counts) != 2 || counts[0].key == counts[1].key {
		t.Fatalf("t_count ran %+v: want once for each of its two calls", counts)
	}
	slows, _ := slow.calls()
	if len(slows) != 2 || slows[0].key != slows[1].key || !slows[1].inDoubt {
		t.Fatalf("t_slow ran %+v: want once, then again in doubt", slows)
	}
}
