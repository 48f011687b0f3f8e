package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools/natstool"
)

const agentFile = `name: support
labels: {team: care}
instructions: |
  You answer customers.
provider: openai
model: gpt-4.1
tools: [ledger_append, wait_for_approval]
---
name: researcher
instructions: Dig.
provider: anthropic
model: claude-sonnet-4-5
`

// The agents commands: apply a file (checked against the tools the
// deployment serves, all or nothing), list, show, history, diff, delete.
func TestAdminAgents(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a := &admin{t: t, bin: buildAdmin(t, t.TempDir()), url: srv.URL(), cache: filepath.Join(t.TempDir(), "cache")}
	file := filepath.Join(t.TempDir(), "agents.yaml")
	write(t, file, agentFile)

	// ledger_append is not served yet: nothing is written.
	a.fails(2, `tool "ledger_append": no such tool on the deployment (--allow-unknown-tools`, "agents", "apply", "-f", file)
	if last, err := c.LastSeq(ctx, streams.Agents); err != nil || last != 0 {
		t.Fatalf("a refused apply wrote %d records, %v", last, err)
	}
	ledger, err := natstool.Serve(srv.Conn(t), "lash", micro.Config{Name: "ledger", Version: "1.0.0"}, natstool.Served{
		Name: "ledger_append", Description: "append to the ledger", Schema: []byte(`{"type":"object"}`),
		Handle: func(context.Context, natstool.Request) (string, error) { return "ok", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Stop()

	type applied struct {
		DryRun bool `json:"dry_run"`
		Agents []struct {
			Agent    string `json:"agent"`
			Revision int    `json:"revision"`
			Version  string `json:"version"`
			Changed  bool   `json:"changed"`
		} `json:"agents"`
	}
	var ap applied
	a.json(&ap, "agents", "apply", "-f", file, "--dry-run")
	if !ap.DryRun || len(ap.Agents) != 2 || !ap.Agents[0].Changed {
		t.Fatalf("dry run: %+v", ap)
	}
	if last, _ := c.LastSeq(ctx, streams.Agents); last != 0 {
		t.Fatal("a dry run wrote")
	}
	a.json(&ap, "agents", "apply", "-f", file)
	if len(ap.Agents) != 2 || !ap.Agents[0].Changed || ap.Agents[0].Revision != 1 || ap.Agents[1].Agent != "researcher" {
		t.Fatalf("apply: %+v", ap)
	}
	first := ap.Agents[0].Version
	a.json(&ap, "agents", "apply", "-f", file)
	if ap.Agents[0].Changed || ap.Agents[1].Changed {
		t.Fatalf("the same file again changed something: %+v", ap)
	}
	write(t, file, strings.Replace(agentFile, "You answer customers.", "You answer customers, briefly.", 1))
	a.json(&ap, "agents", "apply", "-f", file, "--if-revision", "1")
	if !ap.Agents[0].Changed || ap.Agents[0].Revision != 2 || ap.Agents[1].Changed {
		t.Fatalf("a changed definition: %+v", ap)
	}
	a.fails(1, "is at revision 2, not 1", "agents", "apply", "-f", file, "--if-revision", "1")

	var ls struct {
		Agents []agentJSON `json:"agents"`
	}
	a.json(&ls, "agents", "ls")
	if len(ls.Agents) != 2 || ls.Agents[0].Name != "researcher" || ls.Agents[1].Revision != 2 || ls.Agents[1].Labels["team"] != "care" {
		t.Fatalf("ls: %+v", ls.Agents)
	}
	contains(t, a.ok("agents", "ls"), "support", "ledger_append,wait_for_approval", "team=care")
	contains(t, a.ok("agents", "show", "support@1"), "# support@1, version "+first, "You answer customers.\n")
	contains(t, a.ok("agents", "show", "support@"+first[:8]), "support@1")
	contains(t, a.ok("agents", "diff", "support"), "--- support@1", "+++ support@2", "-    You answer customers.", "+    You answer customers, briefly.")
	contains(t, a.ok("agents", "history", "support"), "1", "2", "applied")
	a.fails(1, `no agent "support@9"`, "agents", "show", "support@9")
	a.fails(1, "one revision", "agents", "diff", "researcher")

	a.ok("agents", "delete", "support")
	a.json(&ls, "agents", "ls")
	if len(ls.Agents) != 1 {
		t.Fatalf("ls after a deletion: %+v", ls.Agents)
	}
	contains(t, a.ok("agents", "history", "support"), "deleted")
	a.fails(1, `no agent "support"`, "agents", "delete", "support")

	// Bad files: a clear error, nothing written.
	last, _ := c.LastSeq(ctx, streams.Agents)
	for _, bad := range []struct{ file, want string }{
		{"name: x\nprovider: openai\nmodel: m\ntemprature: 1\n", "field temprature not found"},
		{"name: x\nprovider: gemini\nmodel: m\n", `provider "gemini"`},
		{"name: " + strings.Repeat("x", 65) + "\nprovider: openai\nmodel: m\n", "1 to 64 bytes"},
		{"name: x\nprovider: openai\nmodel: m\n---\nname: x\nprovider: openai\nmodel: n\n", "defined twice"},
	} {
		write(t, file, bad.file)
		a.fails(2, bad.want, "agents", "apply", "-f", file)
	}
	a.fails(2, "give the definition file", "agents", "apply")
	if now, _ := c.LastSeq(ctx, streams.Agents); now != last {
		t.Fatalf("bad files wrote %d records", now-last)
	}
	// From stdin.
	r := a.runIn(strings.NewReader("name: stdin\nprovider: openai\nmodel: m\n"), "--nats", a.url, "--cache", a.cache, "agents", "apply", "-f", "-")
	if r.code != 0 || !strings.Contains(r.stdout, "stdin") {
		t.Fatalf("apply from stdin: %+v", r)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
