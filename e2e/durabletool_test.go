package e2e

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/testenv"
)

// A tool served over NATS does durable work through the node API with its
// call's ticket (examples/tool-server's ledger_propose): it records a step,
// mints an event key and parks the call on it. The node is SIGKILLed while
// the call is parked; the key's value, published by an outsider, resumes
// the call on another node, and the step is not run again.
func TestNATSToolDurableWork(t *testing.T) {
	d := newDeployment(t)
	tools, _ := d.toolServer()
	durableToolRun(t, d, tools, "ledger_propose")
	// A ticket the deployment did not sign writes nothing.
	enc := base64.RawURLEncoding.EncodeToString
	forged := "ct1." + enc([]byte("s1")) + "." + enc([]byte("call_1")) + ".bm90LWEtbWFj"
	var e *nodeapi.Error
	if _, err := nodeapi.NewClient(d.nc, "lash").Step(t.Context(), forged, "reserve", json.RawMessage(`"x"`)); !errors.As(err, &e) || e.Code != nodeapi.CodeBadRequest {
		t.Fatalf("a forged ticket: %v", err)
	}
}

// The same from JavaScript with the plain NATS client (examples/js-tool):
// nothing of lash's Go code in the tool. It needs node and npm (and npm's
// registry, once); LASH_REQUIRE_NODE=1 (set by .ci/run) fails instead of
// skipping without them.
func TestJSToolDurableWork(t *testing.T) {
	node, dir := npmProject(t, filepath.Join("..", "examples", "js-tool"), "tool.mjs")
	d := newDeployment(t)
	cmd := exec.Command(node, "tool.mjs")
	cmd.Dir = dir
	tool := startCmd(t, "js-tool", []string{"NATS_URL=" + d.url}, cmd)
	tool.waitLine("serving js_propose", 30*time.Second)
	durableToolRun(t, d, tool, "js_propose")
}

// npmProject copies a Node.js project's package.json, its lock file and
// the files named from src into a temporary directory, installs what the
// lock file pins, and returns node's path and the directory. Without node
// and npm the test skips, or fails under LASH_REQUIRE_NODE=1 (.ci/run).
func npmProject(t *testing.T, src string, files ...string) (node, dir string) {
	t.Helper()
	node, nerr := exec.LookPath("node")
	npm, merr := exec.LookPath("npm")
	if nerr != nil || merr != nil {
		if os.Getenv("LASH_REQUIRE_NODE") != "" {
			t.Fatalf("node and npm are required (LASH_REQUIRE_NODE): %v %v", nerr, merr)
		}
		t.Skip("node or npm not installed")
	}
	dir = t.TempDir()
	for _, f := range append([]string{"package.json", "package-lock.json"}, files...) {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	return node, dir
}

// durableToolRun has a turn call the durable tool, kills its node while
// the call is parked on the approval, and resolves the approval for
// another node to finish: the step ran once.
func durableToolRun(t *testing.T, d *deployment, tools *proc, name string) {
	t.Helper()
	script := "rule propose\n  when user contains propose\n  when tools = 0\n  call " + name + " {\"entry\":\"pay 5\"}\n\n" +
		"rule done\n  when tool contains approved\n  say done approving\n\ndefault\n  say ok\n"
	args := []string{"--script", d.file("agent.script", script), "--model", "scripted"}
	a := d.startNode("node-a", args...)
	seq := d.send("s1", "k1", []byte(`{"text":"propose a payment"}`))
	var key string
	testenv.WaitFor(t, 30*time.Second, func() error {
		for _, l := range tools.lines() {
			if _, k, ok := strings.Cut(l, "approval key="); ok {
				key = k
				return nil
			}
		}
		return fmt.Errorf("no approval key yet: %q", tools.lines())
	})
	// Parked: the turn commits waiting on the event.
	if ts := d.committed("s1", fmt.Sprintf("in-%d", seq)); ts.Turns[0].Status != "waiting" {
		t.Fatalf("turn %+v", ts.Turns[0])
	}
	a.kill()
	if n := tools.count("reserve key="); n != 1 {
		t.Fatalf("the step ran %d times before the kill", n)
	}
	d.startNode("node-b", args...)
	id, _, _ := strings.Cut(key, ".")
	if err := d.nc.Publish("lash.signal.event."+id, []byte(fmt.Sprintf(`{"key":%q,"value":"yes"}`, key))); err != nil {
		t.Fatal(err)
	}
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	d.waitAnswer("s1", "done approving")
	if n := tools.count("reserve key="); n != 1 {
		t.Fatalf("the recorded step ran again: %d times", n)
	}
	if n := tools.count("approved key="); n != 1 {
		t.Fatalf("%d approvals", n)
	}
}
