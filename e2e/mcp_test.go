package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A node offers the tools of an MCP server it runs as a child process (the
// official SDK's, examples/mcp-server): a turn calls one; the node is
// SIGKILLed after the result was recorded and before the turn committed;
// another node finishes the turn from the journal without calling the tool
// again. A server that crashes mid-call gives a failed call the model
// reads.
func TestMCPTools(t *testing.T) {
	d := newDeployment(t)
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls.log")
	servers := d.file("mcp.yaml", fmt.Sprintf("- name: ledger\n  command: [%q, --journal, %q, --calls, %q, --test-tools]\n",
		binary(t, "mcp-server"), filepath.Join(dir, "ledger.jsonl"), calls))
	script := "rule append\n  when user contains append\n  when tools = 0\n  call ledger__ledger_append {\"entry\":\"hello\"}\n\n" +
		"rule park\n  when user contains append\n  when tools = 1\n  say appended it\n  call wait_for_approval {\"request\":\"done?\"}\n\n" +
		"rule crash\n  when user contains crash\n  when tools = 0\n  call ledger__crash {}\n\n" +
		"rule crashed\n  when user contains crash\n  when tools = 1\n  say the server crashed\n\n" +
		"default\n  say ok\n"
	args := []string{"--script", d.file("agent.script", script), "--mcp-servers", servers, "--decision-wait", "6s"}
	a := d.startNode("node-a", args...)
	a.waitLine(`tool found" tool=ledger__ledger_append`, 30*time.Second)
	seq := d.send("s1", "k1", []byte(`{"text":"append please"}`))
	turnID := fmt.Sprintf("in-%d", seq)
	d.waitPending("s1", turnID)
	a.kill()
	if n := count(t, calls, "ledger_append"); n != 1 {
		t.Fatalf("%d calls before the replay", n)
	}
	d.startNode("node-b", args...)
	if ts := d.committed("s1", turnID); ts.Turns[0].Status != "waiting" {
		t.Fatalf("turn %+v", ts.Turns[0])
	}
	if n := count(t, calls, "ledger_append"); n != 1 {
		t.Fatalf("the replay called the MCP tool again: %d calls", n)
	}
	log, err := os.ReadFile(calls)
	if err != nil || !strings.Contains(string(log), "ledger_append s1/") {
		t.Fatalf("the idempotency key did not reach the server in _meta: %s", log)
	}

	d.send("s2", "k1", []byte(`{"text":"crash it"}`))
	tr := d.waitAnswer("s2", "the server crashed")
	failed := false
	for _, m := range tr {
		failed = failed || m.Role == "tool" && strings.Contains(m.Text, "MCP server ledger")
	}
	if !failed {
		t.Fatalf("the crash is not a failed call in the transcript: %+v", tr)
	}
}

// count counts the lines of path that contain s.
func count(t *testing.T, path, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}

// A turn calls the tool of an MCP server over streamable HTTP (a real
// process of the SDK's server), with its key in _meta; the servers file's
// header is read from the node's environment (its delivery is
// mcptool.TestStreamableHTTP's).
func TestMCPToolsOverHTTP(t *testing.T) {
	d := newDeployment(t)
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls.log")
	srv := start(t, "mcp-server", "mcp-server", "--http", "127.0.0.1:0", "--journal", filepath.Join(dir, "ledger.jsonl"), "--calls", calls)
	srv.waitLine("serving streamable HTTP on", 30*time.Second)
	var url string
	for _, l := range srv.lines() {
		if _, u, ok := strings.Cut(l, "serving streamable HTTP on "); ok {
			url = u
		}
	}
	servers := d.file("mcp.yaml", fmt.Sprintf("- name: web\n  url: %s\n  headers: {X-Team: env:LASH_E2E_TEAM}\n", url))
	script := "rule append\n  when user contains append\n  when tools = 0\n  call web__ledger_append {\"entry\":\"over http\"}\n\n" +
		"rule done\n  when user contains append\n  when tools = 1\n  say appended over http\n\ndefault\n  say ok\n"
	node := startEnv(t, "node-a", []string{"LASH_E2E_TEAM=care"}, "lash-node", "--nats", d.url, "--node-id", "node-a",
		"--data", filepath.Join(d.dir, "node-a"), "--http", "off", "--log-format", "text",
		"--script", d.file("agent.script", script), "--mcp-servers", servers)
	node.waitLine(`tool found" tool=web__ledger_append`, 30*time.Second)
	d.send("h1", "k1", []byte(`{"text":"append it"}`))
	tr := d.waitAnswer("h1", "appended over http")
	got := false
	for _, m := range tr {
		got = got || m.Role == "tool" && m.Text == "appended"
	}
	if !got || count(t, calls, "ledger_append h1/") != 1 {
		t.Fatalf("the MCP call over HTTP: %+v", tr)
	}
	if count(t, calls, "ticket=true") != 1 {
		t.Fatal("the call's ticket did not reach the server in _meta (lash/call_ticket)")
	}
	// lash-admin learns the node's MCP tools: an agent may name one.
	var ap struct {
		Agents []struct {
			Agent   string `json:"agent"`
			Changed bool   `json:"changed"`
		} `json:"agents"`
	}
	d.admin(&ap, "agents", "apply", "-f", d.file("agent.yaml", "name: clerk\nprovider: openai\nmodel: m\ntools: [web__ledger_append, sleep]\n"))
	if len(ap.Agents) != 1 || !ap.Agents[0].Changed {
		t.Fatalf("agents apply: %+v", ap)
	}
}
