package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
)

const agentsScript = `
rule support
  when system contains support desk
  say support answered

rule research
  when system contains researcher
  say research answered

rule one-nap
  when system contains Version one
  when tools = 0
  call sleep {"seconds":1}

rule one
  when system contains Version one
  delay 4s
  say one answered

rule two
  when system contains Version two
  say two answered
`

// One lash-node serves two agents on two providers (the test model server
// speaking OpenAI's and Anthropic's APIs) beside its default agent: each
// request carries only its agent's instructions and tools. An agent
// updated while one of its turns waits on the model, its node SIGKILLed
// then: another node finishes the turn under the version it began with,
// the next turn runs the new one, a pinned session stays, and verify
// passes for every turn.
func TestAgentsOnANode(t *testing.T) {
	models := testenv.RunModelServer(t, scripted.MustParse(agentsScript))
	d := newDeployment(t)
	args := []string{"--script", d.file("default.script", "default\n  say default answered\n"),
		"--openai-url", models.URL(), "--anthropic-url", models.AnthropicURL()}
	a := d.startNode("node-a", args...)
	apply := func(yaml string) {
		t.Helper()
		var out struct {
			Agents []struct {
				Revision int `json:"revision"`
			} `json:"agents"`
		}
		d.admin(&out, "agents", "apply", "-f", d.file("agent.yaml", yaml))
	}
	apply("name: support\ninstructions: You are the support desk.\nprovider: openai\nmodel: gpt-support\ntools: [sleep]\n" +
		"---\nname: research\ninstructions: You are a researcher.\nprovider: anthropic\nmodel: claude-research\n" +
		"---\nname: v\ninstructions: Version one.\nprovider: openai\nmodel: m\ntools: [sleep]\n")
	d.send("s1", "k1", []byte(`{"text":"help me","agent":"support"}`))
	d.send("s2", "k1", []byte(`{"text":"dig into it","agent":"research"}`))
	d.send("s3", "k1", []byte(`{"text":"hello"}`))
	d.waitAnswer("s1", "support answered")
	d.waitAnswer("s2", "research answered")
	d.waitAnswer("s3", "default answered")
	for _, rec := range models.Seen() {
		req := rec.Request
		var names []string
		for _, s := range req.Tools {
			names = append(names, s.Name)
		}
		switch {
		case req.Model == "gpt-support" && system(req) == "You are the support desk." && slices.Equal(names, []string{"sleep"}):
		case req.Model == "claude-research" && system(req) == "You are a researcher." && len(names) == 0:
		default:
			t.Fatalf("a request for %q with system %q and tools %v", req.Model, system(req), names)
		}
	}
	if models.Requests() != 2 {
		t.Fatalf("%d requests reached the agents' model server, want 2", models.Requests())
	}

	// Mid-turn: the model call after the nap is delayed at the server.
	before := models.Requests()
	seq := d.send("u", "k1", []byte(`{"text":"go","agent":"v"}`))
	testenv.WaitFor(t, 30*time.Second, func() error {
		if models.Requests() < before+2 {
			return fmt.Errorf("%d requests", models.Requests()-before)
		}
		return nil
	})
	a.kill()
	apply("name: v\ninstructions: Version two.\nprovider: openai\nmodel: m\n")
	d.startNode("node-b", args...)
	d.committed("u", fmt.Sprintf("in-%d", seq))
	d.waitAnswer("u", "one answered")
	for _, rec := range models.Seen()[before:] {
		if s := system(rec.Request); s != "Version one." {
			t.Fatalf("a request of the turn begun under version one asked with %q", s)
		}
	}
	d.send("u", "k2", []byte(`{"text":"again"}`))
	d.waitAnswer("u", "two answered")
	// Pins come from operators: lash-admin's is signed; a client's raw
	// publish of one is consumed refused, without a turn.
	var pinned struct {
		Seq uint64 `json:"seq"`
	}
	d.admin(&pinned, "send", "--agent", "v@1", "p", "go")
	d.waitAnswer("p", "one answered")
	if n := d.consumed("q", d.send("q", "k1", []byte(`{"text":"go","agent":"v@1"}`))); n != 0 {
		t.Fatalf("a client's pin ran %d turns", n)
	}

	base := []string{"--nats", d.url, "--cache", filepath.Join(d.dir, "admin-cache")}
	out, errOut, code := run(t, "lash-admin", append(base, "verify", "u")...)
	if code != 0 || strings.Count(out, "OK") < 2 {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errOut)
	}

	// lash-admin send binds and labels a session; sessions ls shows both
	// and filters by label. A name with no agent appends nothing.
	var sent struct {
		Seq uint64 `json:"seq"`
	}
	d.admin(&sent, "send", "--agent", "support", "--label", "team=care", "--label", "tier=gold", "s4", "help me")
	d.waitAnswer("s4", "support answered")
	if _, errOut, code := run(t, "lash-admin", append(base, "send", "--agent", "nosuch", "s5", "hi")...); code == 0 || !strings.Contains(errOut, "no such agent") {
		t.Fatalf("send --agent nosuch: exit %d: %s", code, errOut)
	}
	var ls struct {
		Sessions []struct {
			Session string            `json:"session"`
			Agent   string            `json:"agent"`
			Labels  map[string]string `json:"labels"`
		} `json:"sessions"`
	}
	d.admin(&ls, "sessions", "ls", "--label", "team=care")
	if len(ls.Sessions) != 1 || ls.Sessions[0].Session != "s4" || ls.Sessions[0].Agent != "support" || ls.Sessions[0].Labels["tier"] != "gold" {
		t.Fatalf("sessions ls --label team=care: %+v", ls.Sessions)
	}
}

func system(req turn.ModelRequest) string {
	for _, m := range req.Messages {
		if m.Role == turn.RoleSystem {
			return m.Text
		}
	}
	return ""
}
