package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
)

type transcriptMessage struct {
	Role string `json:"role"`
	Text string `json:"text"`
}

// waitAnswer waits until the session's transcript ends with the model's
// answer text, and returns the transcript.
func (d *deployment) waitAnswer(session, text string) []transcriptMessage {
	d.t.Helper()
	var tr struct {
		Messages []transcriptMessage `json:"messages"`
	}
	testenv.WaitFor(d.t, 60*time.Second, func() error {
		tr.Messages = nil
		if err := d.tryAdmin(&tr, "transcript", session); err != nil {
			return err
		}
		if n := len(tr.Messages); n == 0 || tr.Messages[n-1].Text != text {
			return fmt.Errorf("%s has no answer %q yet: %+v", session, text, tr.Messages)
		}
		return nil
	})
	return tr.Messages
}

type processEvents struct {
	Events []struct {
		N     uint64          `json:"n"`
		Type  string          `json:"type"`
		Token uint64          `json:"token"`
		By    string          `json:"by"`
		Data  json.RawMessage `json:"data"`
	} `json:"events"`
}

func (d *deployment) processEvents(id string) []string {
	d.t.Helper()
	var evs processEvents
	d.admin(&evs, "processes", "events", id)
	var types []string
	for _, e := range evs.Events {
		types = append(types, e.Type)
	}
	return types
}

// A background tool call runs on a node that is SIGKILLed while the tool
// (served by another process) runs it. The next node, proving the first
// dead by its PID, runs it again, in doubt, and the tool applies it once.
// An owner-bound call then started on that node, which is killed in turn,
// is never run again but marked abandoned by the third node, naming the
// dead owner and the evidence.
func TestProcessesSurviveKill(t *testing.T) {
	d := newDeployment(t)
	tool, ledger := d.toolServer("--delay", "2s")
	api := nodeapi.NewClient(d.nc, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startAndKill := func(p *proc, req nodeapi.ProcessStartRequest) {
		t.Helper()
		if _, err := api.ProcessStart(ctx, req); err != nil {
			t.Fatal(err)
		}
		tool.waitLine("begin key=/proc:"+req.ID+"/", 30*time.Second)
		p.kill()
	}
	startAndKill(d.node("node-a", ledgerScript), nodeapi.ProcessStartRequest{ID: "backup", Tool: "ledger_append", Args: json.RawMessage(`{"entry":"backup"}`)})
	second := d.node("node-b", ledgerScript)
	backup, err := api.ProcessAwait(ctx, "backup", 0)
	if err != nil || backup.Status != "completed" || backup.Attempts != 2 {
		t.Fatalf("backup: %+v, %v; want completed by attempt 2", backup, err)
	}
	startAndKill(second, nodeapi.ProcessStartRequest{ID: "deploy", Tool: "ledger_append", Args: json.RawMessage(`{"entry":"deploy"}`), Disposition: "owner_bound"})
	d.node("node-c", ledgerScript)
	deploy, err := api.ProcessAwait(ctx, "deploy", 0)
	if err != nil || deploy.Status != "abandoned" || deploy.Attempts != 1 {
		t.Fatalf("deploy: %+v, %v; want abandoned after one attempt", deploy, err)
	}
	var why struct {
		Writer   string `json:"writer"`
		Evidence string `json:"evidence"`
		Owner    struct {
			Node string `json:"node"`
		} `json:"owner"`
	}
	if err := json.Unmarshal(deploy.Outcome, &why); err != nil || why.Writer != "sweep" || why.Owner.Node != "node-b" || !strings.Contains(why.Evidence, "gone") {
		t.Fatalf("deploy's abandonment %s: want the sweep, naming node-b and the evidence", deploy.Outcome)
	}
	// Registered where it ran first, with attempt 1 started in the
	// registration.
	if got := fmt.Sprint(d.processEvents("backup")); got != "[registered started completed]" {
		t.Fatalf("backup's events %s", got)
	}
	if got := fmt.Sprint(d.processEvents("deploy")); got != "[registered abandoned]" {
		t.Fatalf("deploy's events %s", got)
	}
	// The rerun came in doubt, and the tool applied each entry once.
	testenv.WaitFor(t, 20*time.Second, func() error {
		if n := tool.count("invoke key="); n != 3 {
			return fmt.Errorf("%d calls done, want 3", n)
		}
		return nil
	})
	inDoubt := tool.count("begin key=/proc:backup/0/tool-call/0/backup attempt=2 in_doubt=true")
	if inDoubt != 1 || tool.count("begin key=") != 3 || tool.count("applied=true") != 2 {
		t.Fatalf("tool: %d runs in doubt, %d begun, %d applied; want 1, 3 and 2", inDoubt, tool.count("begin key="), tool.count("applied=true"))
	}
	if n := ledgerLines(t, ledger); n != 2 {
		t.Fatalf("ledger has %d lines, want 2 (backup once, deploy's first run)", n)
	}
}

const agentScript = `
rule child-tool
  when user contains count the ledger
  when tools = 0
  call ledger_append {"entry":"child"}

rule child-answer
  when user contains count the ledger
  when tools = 1
  say the ledger holds one entry

rule spawn
  when user contains ask a helper
  when tools = 0
  call spawn_agent {"task":"count the ledger","name":"helper"}

rule await
  when user contains ask a helper
  when tools = 1
  call process_await {"process":"helper"}

rule done
  when tool contains the ledger holds one entry
  say the helper counted

default
  say noted
`

// A turn spawns a sub-agent and parks on it; the node is SIGKILLed while
// the sub-agent's tool runs. The next node finishes the sub-agent's turn
// from its journal (the tool again, in doubt; its recorded model call not
// again), runs the process's next attempt, which finds that turn, and the
// parent goes on with the sub-agent's answer: one model request per model
// call the journals hold.
func TestSubAgentSurvivesKill(t *testing.T) {
	d := newDeployment(t)
	tool, _ := d.toolServer("--delay", "2s")
	models := testenv.RunModelServer(t, scripted.MustParse(agentScript))
	model := []string{"--base-url", models.URL(), "--model", "scripted"}
	first := d.startNode("node-a", model...)
	d.send("lead", "k1", []byte(`{"text":"ask a helper"}`))
	tool.waitLine("begin key=", 30*time.Second)
	if got := models.Requests(); got != 3 {
		t.Fatalf("%d model requests before the kill, want 3 (spawn, await, the sub-agent's tool call)", got)
	}
	first.kill()

	d.startNode("node-b", model...)
	d.waitAnswer("lead", "the helper counted")
	if got := models.Requests(); got != 5 {
		t.Fatalf("%d model requests in all, want 5: one per model call, none repeated", got)
	}
	var ps struct {
		Processes []struct {
			ID       string `json:"id"`
			Status   string `json:"status"`
			Attempts int    `json:"attempts"`
			Kind     string `json:"kind"`
		} `json:"processes"`
	}
	d.admin(&ps, "processes", "ls")
	if len(ps.Processes) != 1 || ps.Processes[0].Status != "completed" || ps.Processes[0].Kind != "session_turn" || ps.Processes[0].Attempts != 2 {
		t.Fatalf("processes %+v; want the sub-agent completed by its second attempt", ps.Processes)
	}
	if n := tool.count("in_doubt=true"); n == 0 {
		t.Fatal("the sub-agent's tool call was not run again in doubt")
	}
}

const backgroundScript = `
rule told
  when notice contains [process
  say it is done

rule bg
  when user contains in the background
  when tools = 0
  call process_start {"tool":"ledger_append","args":{"entry":"bg"},"name":"bg"}

rule bg-started
  when user contains in the background
  when tool contains started
  say started it

`

// Through lash-node and a scripted model: a turn starts a tool served by
// another process in the background and ends; the tool's end comes back to
// the session as a notice (a system message, never the user's) that
// starts the next turn; lash-admin lists the process.
func TestBackgroundToolWakesSession(t *testing.T) {
	d := newDeployment(t)
	d.toolServer()
	d.node("node-a", backgroundScript)
	d.send("s1", "k1", []byte(`{"text":"append in the background"}`))
	var told string
	for _, m := range d.waitAnswer("s1", "it is done") {
		if strings.HasPrefix(m.Text, "[process") {
			if m.Role != "system" {
				t.Fatalf("the end came as a %s message", m.Role)
			}
			told = m.Text
		}
	}
	if !strings.HasSuffix(told, `(tool ledger_append) completed] appended "bg"`) {
		t.Fatalf("told %q", told)
	}
	var ps struct {
		Processes []struct {
			ID      string `json:"id"`
			Status  string `json:"status"`
			Session string `json:"session"`
			What    string `json:"what"`
		} `json:"processes"`
	}
	d.admin(&ps, "processes", "ls", "--session", "s1")
	if len(ps.Processes) != 1 || ps.Processes[0].Status != "completed" || ps.Processes[0].What != "ledger_append" || !strings.Contains(told, ps.Processes[0].ID) {
		t.Fatalf("processes of s1: %+v", ps.Processes)
	}
}

// silentRunnerEnv makes the test binary a runner that goes silent: it
// registers and starts the process named by the variable, writes nothing
// more, and keeps its node's liveness beating, as a runner stuck in its
// work would, until it is killed.
const silentRunnerEnv = "LASH_E2E_SILENT_RUNNER"

func silentRunner(url, pid string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "silent runner:", err); return 1 }
	nc, err := nats.Connect(url)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	c, err := streams.Open(ctx, nc, streams.Config{})
	if err != nil {
		return fail(err)
	}
	// A node of the deployment: it signs with the deployment's secret.
	secret, err := os.ReadFile(os.Getenv("LASH_SECRET_FILE"))
	if err != nil {
		return fail(err)
	}
	if err := c.Sign(ctx, bytes.TrimSpace(secret)); err != nil {
		return fail(err)
	}
	m := leases.New(c, leases.LocalOwner("silent-node"))
	if err := m.Beat(ctx, 2*time.Second); err != nil {
		return fail(err)
	}
	// Registered with its first attempt started in one write, so no node
	// runs it.
	r := processes.New(c, "silent-node")
	reg := processes.Registration{Input: processes.Input{Kind: processes.ToolCall, Tool: "ledger_append", Args: json.RawMessage(`{"entry":"deploy"}`)},
		Disposition: processes.OwnerBound, Provenance: processes.Provenance{Host: "silent-node"}}
	if _, _, created, err := r.RegisterStarted(ctx, pid, reg, m.Owner()); err != nil || !created {
		return fail(fmt.Errorf("registering %s: created %v, %v", pid, created, err))
	}
	fmt.Println("started")
	for {
		time.Sleep(500 * time.Millisecond)
		if err := m.Beat(ctx, 2*time.Second); err != nil {
			return fail(err)
		}
	}
}

// Owner-bound work whose runner went silent (its node's liveness still
// beats) is left open and unrun by the nodes' sweeps; once
// the runner is SIGKILLed, its PID proves it dead and the work is marked
// abandoned, naming it.
func TestSilentRunnerLeftOpenUntilKilled(t *testing.T) {
	d := newDeployment(t)
	d.toolServer()
	d.node("node-a", ledgerScript)
	d.node("node-b", ledgerScript)
	api := nodeapi.NewClient(d.nc, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runner := startCmd(t, "silent-runner", []string{silentRunnerEnv + "=deploy", "LASH_E2E_NATS=" + d.url}, exec.Command(os.Args[0], "-test.run=^$"))
	runner.waitLine("started", 30*time.Second)
	// The nodes sweep every 2s: over four sweeps and more the process
	// stays as the runner left it.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		info, err := api.ProcessStatus(ctx, "deploy")
		if err != nil || info.Ended || info.Attempts != 1 || info.Status != "running" {
			t.Fatalf("while its runner is silent: %+v, %v; want it running, one attempt", info, err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	runner.kill()
	info, err := api.ProcessAwait(ctx, "deploy", 0)
	var why struct {
		Writer   string `json:"writer"`
		Evidence string `json:"evidence"`
		Owner    struct {
			Node string `json:"node"`
		} `json:"owner"`
	}
	if err != nil || info.Status != "abandoned" || json.Unmarshal(info.Outcome, &why) != nil || why.Writer != "sweep" || why.Owner.Node != "silent-node" {
		t.Fatalf("after the kill: %+v (%s), %v; want abandoned by the sweep, naming silent-node", info, info.Outcome, err)
	}
	if got := fmt.Sprint(d.processEvents("deploy")); got != "[registered abandoned]" {
		t.Fatalf("events %s", got)
	}
}
