package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/processes"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

func call(t *testing.T, tool tools.Tool, args string, decision *turn.Decision) (tools.Result, error) {
	t.Helper()
	ctx := tools.NewContext(context.Background(), tools.CallInfo{Attempt: 1, Decision: decision})
	return tool.Call(ctx, json.RawMessage(args))
}

func ticketOf(t *testing.T, err error) Ticket {
	t.Helper()
	var pe *tools.PendingError
	if !errors.As(err, &pe) {
		t.Fatalf("want a pending call, got %v", err)
	}
	tk, ok := ParseTicket(pe.Ticket)
	if !ok {
		t.Fatalf("ticket %q does not parse", pe.Ticket)
	}
	return tk
}

func TestSleep(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	s := Sleep(func() time.Time { return now })
	_, err := call(t, s, `{"seconds":90}`, nil)
	if tk := ticketOf(t, err); tk.Kind != SleepTicket || !tk.Until.Equal(now.Add(90*time.Second)) {
		t.Fatalf("ticket %+v", tk)
	}
	for _, bad := range []string{`{"seconds":0}`, `{"seconds":-1}`, `{"seconds":1e12}`} {
		if _, err := call(t, s, bad, nil); err == nil {
			t.Errorf("%s parked", bad)
		}
	}
	if res, err := call(t, s, `{"seconds":90}`, &turn.Decision{ID: "d"}); err != nil || res.Output != "slept" {
		t.Fatalf("resumed sleep: %+v %v", res, err)
	}
}

func TestApproval(t *testing.T) {
	a := Approval()
	_, err := call(t, a, `{"request":"ship it?"}`, nil)
	if tk := ticketOf(t, err); tk.Kind != ApprovalTicket || tk.Text != "ship it?" {
		t.Fatalf("ticket %+v", tk)
	}
	if _, err := call(t, a, `{"request":"  "}`, nil); err == nil {
		t.Error("an empty request parked")
	}
	if res, _ := call(t, a, `{"request":"x"}`, &turn.Decision{ID: "d"}); res.Output != "approved" {
		t.Errorf("resumed: %+v", res)
	}
	if res, _ := call(t, a, `{"request":"x"}`, &turn.Decision{ID: "d", Payload: "no: too late"}); res.Output != "no: too late" {
		t.Errorf("resumed with a payload: %+v", res)
	}
}

func TestSignal(t *testing.T) {
	s := Signal("lash")
	_, err := call(t, s, `{"name":"deploy.42"}`, nil)
	if tk := ticketOf(t, err); tk.Kind != SignalTicket || tk.Subject != "lash.signal.deploy.42" {
		t.Fatalf("ticket %+v", tk)
	}
	long := `{"name":"` + strings.Repeat("a", MaxSignalName+1) + `"}`
	for _, bad := range []string{`{"name":""}`, `{"name":"a..b"}`, `{"name":"a.*"}`, `{"name":"a b"}`, `{"name":">"}`, long} {
		if _, err := call(t, s, bad, nil); err == nil {
			t.Errorf("%s parked", bad)
		}
	}
	if res, _ := call(t, s, `{"name":"x"}`, &turn.Decision{ID: "d", Payload: `{"v":1}`}); res.Output != `{"v":1}` {
		t.Errorf("resumed: %+v", res)
	}
}

func TestParseTicket(t *testing.T) {
	for _, bad := range []string{"", "sleep-until soon", "signal", "signal ", "other thing"} {
		if _, ok := ParseTicket(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestAgentTools(t *testing.T) {
	specs := []turn.ToolSpec{{Name: "build"}, {Name: "deploy"}, {Name: ProcessAwaitTool}, {Name: SpawnAgentTool}}
	agent := func(depth int, allowed []string) *processes.Process {
		return &processes.Process{Registration: processes.Registration{Input: processes.Input{Kind: processes.SessionTurn, Depth: depth, Tools: allowed}}}
	}
	names := func(ss []turn.ToolSpec) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Name)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		depth   int
		allowed []string
		want    string
	}{
		{1, nil, "build,deploy,process_await,spawn_agent"},
		{2, []string{"build"}, "build,process_await,spawn_agent"},
		{MaxAgentDepth, nil, "build,deploy,process_await"},
		{MaxAgentDepth, []string{}, "process_await"},
	} {
		if got := names(AgentTools(agent(c.depth, c.allowed), specs)); got != c.want {
			t.Errorf("depth %d, tools %v: offered %s, want %s", c.depth, c.allowed, got, c.want)
		}
	}
	if !IsProcessID(NamedProcessID("s", "n")) || IsProcessID("p-nothex") || IsProcessID("s1") {
		t.Error("IsProcessID does not tell the ids it makes")
	}
}
