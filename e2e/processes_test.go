package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/testenv"
)

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

// Two background tool calls run on a node that is SIGKILLed while the tool
// (served by another process) runs them. The next node, proving the first
// dead by its PID, runs the rerunnable one again, in doubt, and the tool
// applies it once; the owner-bound one, which started, is never run again
// but marked abandoned, naming the dead owner and the evidence.
func TestProcessesSurviveKill(t *testing.T) {
	d := newDeployment(t)
	tool, ledger := d.toolServer("--delay", "2s")
	first := d.node("node-a", ledgerScript)
	api := nodeapi.NewClient(d.nc, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, req := range []nodeapi.ProcessStartRequest{
		{ID: "backup", Tool: "ledger_append", Args: json.RawMessage(`{"entry":"backup"}`)},
		{ID: "deploy", Tool: "ledger_append", Args: json.RawMessage(`{"entry":"deploy"}`), Disposition: "owner_bound"},
	} {
		if _, err := api.ProcessStart(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	for tool.count("begin key=") < 2 {
		tool.waitLine("begin key=", 30*time.Second)
	}
	first.kill()

	d.node("node-b", ledgerScript)
	backup, err := api.ProcessAwait(ctx, "backup", 0)
	if err != nil || backup.Status != "completed" || backup.Attempts != 2 {
		t.Fatalf("backup: %+v, %v; want completed by attempt 2", backup, err)
	}
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
	if err := json.Unmarshal(deploy.Outcome, &why); err != nil || why.Writer != "sweep" || why.Owner.Node != "node-a" || !strings.Contains(why.Evidence, "gone") {
		t.Fatalf("deploy's abandonment %s: want the sweep, naming node-a and the evidence", deploy.Outcome)
	}
	if got := fmt.Sprint(d.processEvents("backup")); got != "[registered started started completed]" {
		t.Fatalf("backup's events %s", got)
	}
	if got := fmt.Sprint(d.processEvents("deploy")); got != "[registered started abandoned]" {
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
