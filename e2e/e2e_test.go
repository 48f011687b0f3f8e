package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools/natstool"
)

// What lash-admin --json prints, as far as these tests read it.
type (
	effects struct {
		Committed bool `json:"committed"`
		Effects   []struct {
			Key      string `json:"key"`
			Kind     string `json:"kind"`
			Call     string `json:"call"`
			Summary  string `json:"summary"`
			Replayed bool   `json:"replayed"`
			Executed bool   `json:"executed"`
			Recorder string `json:"recorder"`
			InDoubt  bool   `json:"in_doubt"`
		} `json:"effects"`
	}
	turns struct {
		Turns []struct {
			Turn        string `json:"turn"`
			Status      string `json:"status"`
			Committer   string `json:"committer"`
			Termination struct {
				Reason string `json:"reason"`
				Code   string `json:"code"`
				Detail string `json:"detail"`
			} `json:"termination"`
		} `json:"turns"`
	}
	leaseList struct {
		Leases []struct {
			Kind string `json:"kind"`
			ID   string `json:"id"`
			Node string `json:"node"`
		} `json:"leases"`
	}
	nodeList struct {
		Nodes []struct {
			Node string `json:"node"`
		} `json:"nodes"`
	}
	quarantine struct {
		Quarantine []struct {
			Stream  string `json:"stream"`
			Subject string `json:"subject"`
			Reason  string `json:"reason"`
			Preview string `json:"preview"`
		} `json:"quarantine"`
	}
)

const ledgerScript = `
rule write
  when tools = 0
  call ledger_append {"entry":"pay rent"}

rule answer
  when tools = 1
  delay 3s
  say written
`

// node starts a lash-node joined to the deployment's NATS.
func (d *deployment) node(id, script string, extra ...string) *proc {
	args := append([]string{"--nats", d.url, "--script", d.file(id+".script", script), "--model", "scripted",
		"--node-id", id, "--data", filepath.Join(d.dir, id), "--http", "off", "--lease-ttl", "2s",
		"--tool-refresh", "500ms", "--log-format", "text", "--replicas", fmt.Sprint(max(d.replicas, 1))}, extra...)
	p := start(d.t, id, "lash-node", args...)
	p.waitLine("lash-node running", 30*time.Second)
	d.waitNode(id)
	return p
}

// waitNode waits until lash-admin lists the node as live.
func (d *deployment) waitNode(id string) {
	d.t.Helper()
	testenv.WaitFor(d.t, 30*time.Second, func() error {
		var nl nodeList
		if err := d.tryAdmin(&nl, "nodes", "ls"); err != nil {
			return err
		}
		for _, n := range nl.Nodes {
			if n.Node == id {
				return nil
			}
		}
		return fmt.Errorf("node %s is not live: %+v", id, nl)
	})
}

// holder is the node holding the session's lease, once one does.
func (d *deployment) holder(session string) string {
	d.t.Helper()
	var node string
	testenv.WaitFor(d.t, 20*time.Second, func() error {
		var ll leaseList
		if err := d.tryAdmin(&ll, "leases", "ls"); err != nil {
			return err
		}
		for _, l := range ll.Leases {
			if l.Kind == "sess" && l.ID == session {
				node = l.Node
				return nil
			}
		}
		return fmt.Errorf("no lease on %s", session)
	})
	return node
}

// committed waits for the session's turn to be committed and returns the
// session's turns.
func (d *deployment) committed(session, turn string) turns {
	d.t.Helper()
	var ts turns
	testenv.WaitFor(d.t, 60*time.Second, func() error {
		ts = turns{}
		if err := d.tryAdmin(&ts, "turns", session); err != nil {
			return err
		}
		for _, t := range ts.Turns {
			if t.Turn == turn {
				return nil
			}
		}
		return fmt.Errorf("turn %s of %s is not committed yet", turn, session)
	})
	return ts
}

// waitToolRecorded waits until the turn's journal holds a tool call.
func (d *deployment) waitToolRecorded(session, turnID string) {
	d.t.Helper()
	testenv.WaitFor(d.t, 30*time.Second, func() error {
		var ef effects
		if err := d.tryAdmin(&ef, "effects", session, turnID); err != nil {
			return err
		}
		for _, e := range ef.Effects {
			if e.Call != "" && !e.InDoubt {
				return nil
			}
		}
		return fmt.Errorf("no tool call recorded yet: %+v", ef)
	})
}

// toolServer starts the example tool server and waits until it can be
// discovered.
func (d *deployment) toolServer(extra ...string) (*proc, string) {
	d.t.Helper()
	ledger := filepath.Join(d.dir, "ledger.jsonl")
	p := start(d.t, "tool-server", "tool-server", append([]string{"--nats", d.url, "--journal", ledger}, extra...)...)
	testenv.WaitFor(d.t, 20*time.Second, func() error {
		ts, err := natstool.Discover(context.Background(), d.nc, "lash")
		if err == nil && len(ts) == 0 {
			err = fmt.Errorf("no tool served yet")
		}
		return err
	})
	return p, ledger
}

func ledgerLines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// Two nodes share a deployment; inputs come in on the subjects from a plain
// NATS client. The node holding the session's lease is SIGKILLed in the
// middle of the turn, after its tool call was recorded; the other finishes
// the turn once, replaying the recorded model call and tool call.
func TestKillLeaseHolderMidTurn(t *testing.T) { killLeaseHolderMidTurn(t, newDeployment(t)) }

// The same on a 3-server cluster with replicated streams.
func TestClusterKillLeaseHolderMidTurn(t *testing.T) {
	killLeaseHolderMidTurn(t, newClusterDeployment(t))
}

func killLeaseHolderMidTurn(t *testing.T, d *deployment) {
	tool, ledger := d.toolServer()
	nodes := map[string]*proc{"node-a": d.node("node-a", ledgerScript), "node-b": d.node("node-b", ledgerScript)}

	seq := d.send("s1", "k1", []byte(`{"text":"pay the rent"}`))
	turnID := fmt.Sprintf("in-%d", seq)
	// Wait for the tool call's record: the holder is now in the model call
	// that follows it (the script delays it).
	d.waitToolRecorded("s1", turnID)
	victim := d.holder("s1")
	nodes[victim].kill()
	survivor := "node-a"
	if victim == survivor {
		survivor = "node-b"
	}

	ts := d.committed("s1", turnID)
	if len(ts.Turns) != 1 || ts.Turns[0].Status != "done" || !strings.HasPrefix(ts.Turns[0].Committer, survivor+"/") {
		t.Fatalf("turns %+v", ts)
	}
	var ef effects
	d.admin(&ef, "effects", "s1", turnID)
	replayed := map[string]bool{}
	executed := map[string]bool{}
	for _, e := range ef.Effects {
		switch {
		case e.Replayed && e.Recorder == victim:
			replayed[e.Kind] = true
		case e.Executed && e.Recorder == survivor:
			executed[e.Kind] = true
		default:
			t.Errorf("effect %+v: neither replayed from %s nor executed by %s", e, victim, survivor)
		}
	}
	if !ef.Committed || !replayed["llm-call"] || !replayed["tool-call"] || !executed["llm-call"] {
		t.Fatalf("journal: replayed %v, executed %v: %+v", replayed, executed, ef)
	}
	// The tool ran once, and the ledger holds one entry.
	if n := tool.count("begin key="); n != 1 || ledgerLines(t, ledger) != 1 {
		t.Fatalf("tool began %d times, ledger has %d lines", n, ledgerLines(t, ledger))
	}
}

// A node killed while a tool served by another process runs: the next node
// runs the call again, in doubt, and the tool applies it once. Killed again
// after the call's result was recorded, the call is not run a third time.
func TestToolServerCallSurvivesKills(t *testing.T) {
	d := newDeployment(t)
	tool, ledger := d.toolServer("--delay", "2s")
	first := d.node("node-a", ledgerScript)
	seq := d.send("s1", "k1", []byte(`{"text":"pay the rent"}`))
	turnID := fmt.Sprintf("in-%d", seq)
	tool.waitLine("begin key=", 30*time.Second)
	first.kill()

	second := d.node("node-b", ledgerScript)
	tool.waitLine("in_doubt=true", 30*time.Second)
	// Once the retried call's result is recorded, kill the second node in
	// the model call that follows.
	d.waitToolRecorded("s1", turnID)
	second.kill()

	d.node("node-c", ledgerScript)
	ts := d.committed("s1", turnID)
	if len(ts.Turns) != 1 || !strings.HasPrefix(ts.Turns[0].Committer, "node-c/") {
		t.Fatalf("turns %+v", ts)
	}
	if n := tool.count("begin key="); n != 2 {
		t.Fatalf("the tool began %d times, want 2 (the first run and one retry in doubt)", n)
	}
	if tool.count("applied=true") != 1 || ledgerLines(t, ledger) != 1 {
		t.Fatalf("applied %d times, ledger %d lines", tool.count("applied=true"), ledgerLines(t, ledger))
	}
}

const slowScript = `
default
  delay 1500ms
  say done
`

// SIGTERM drains a node: the turns it runs finish, it takes no new work,
// releases its leases and exits 0; the other node runs everything else.
func TestDrainOnSIGTERM(t *testing.T) {
	d := newDeployment(t)
	a := d.node("node-a", slowScript, "--concurrency", "2")
	var turnsOf []string
	for i := range 4 {
		seq := d.send(fmt.Sprintf("s%d", i), "k", []byte(`{"text":"hello"}`))
		turnsOf = append(turnsOf, fmt.Sprintf("in-%d", seq))
	}
	// node-a is in the middle of two turns when it is told to stop.
	d.holder("s0")
	if code := a.signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("drained node exited %d", code)
	}
	var ll leaseList
	d.admin(&ll, "leases", "ls")
	if len(ll.Leases) != 0 {
		t.Fatalf("leases left after the drain: %+v", ll)
	}
	d.node("node-b", slowScript)
	byA := 0
	for i, turnID := range turnsOf {
		ts := d.committed(fmt.Sprintf("s%d", i), turnID)
		if len(ts.Turns) != 1 {
			t.Fatalf("session s%d: %+v", i, ts)
		}
		if strings.HasPrefix(ts.Turns[0].Committer, "node-a/") {
			byA++
		}
	}
	if byA == 0 || byA == len(turnsOf) {
		t.Fatalf("node-a committed %d of %d turns: it should have finished what it ran and left the rest", byA, len(turnsOf))
	}
}

const echoScript = `
default
  say noted
`

// consumed waits until the session's inputs through seq are consumed and
// returns how many turns it has.
func (d *deployment) consumed(session string, seq uint64) int {
	d.t.Helper()
	var h struct {
		Turns       int    `json:"turns"`
		InputCursor uint64 `json:"input_cursor"`
	}
	testenv.WaitFor(d.t, 60*time.Second, func() error {
		if err := d.tryAdmin(&h, "sessions", "show", session); err != nil {
			return err
		}
		if h.InputCursor < seq {
			return fmt.Errorf("session %s consumed through %d, not %d", session, h.InputCursor, seq)
		}
		return nil
	})
	return h.Turns
}

// Bad input on the ingress subjects (inputs and signals): the node keeps
// running, consumes each bad input without a turn, and lash-admin shows the
// messages in the quarantine with the reason; an input over the size limit
// is refused by the stream and never stored.
func TestBadInputOnSubjects(t *testing.T) {
	d := newDeployment(t)
	d.node("node-a", echoScript)
	bad := map[string][]byte{
		"garbled":  []byte(`{"text":`),
		"unknown":  []byte(`{"text":"hi","colour":"red"}`),
		"empty":    []byte(`{}`),
		"trailing": []byte(`{"text":"hi"} xyz`),
		"decision": []byte(`{"decisions":[{"id":"d1","call_id":"nope","action":"resume"}]}`),
	}
	seqs := map[string]uint64{}
	for name, data := range bad {
		seqs[name] = d.send("bad-"+name, "k1", data)
	}
	// On the decision subject: a decision for no call, and text.
	decide := map[string][]byte{"nocall": bad["decision"], "text": []byte(`{"text":"hi"}`)}
	for name, data := range decide {
		seqs[name] = d.sendOn("decide", "bad-"+name, "k1", data)
	}
	// Over the input limit: the stream says no, and stores nothing.
	reply, err := d.nc.Request("lash.sess.bad-oversize.in", []byte(`{"text":"`+strings.Repeat("x", 300<<10)+`"}`), 5*time.Second)
	if err != nil || !strings.Contains(string(reply.Data), "message size exceeds maximum allowed") {
		t.Fatalf("an oversized input: %v %s", err, reply.Data)
	}
	// A signal that is not JSON, on the signal subject.
	if _, err := d.nc.Request("lash.signal.deploy.1", []byte("not json"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Bad requests to the node API are answered with a coded error.
	api := []struct {
		subject, body, code string
	}{
		{"lash.api.submit", `{"session":`, "400"},
		{"lash.api.submit", `{"text":"hi"}`, "400"},
		{"lash.api.status", `{"session":"nobody"}`, "404"},
		{"lash.api.cancel", `{"session":"nobody","key":"k"}`, "404"},
		{"lash.api.submit", `{"session":"s","key":"k","text":"` + strings.Repeat("x", 300<<10) + `"}`, "413"},
	}
	for _, a := range api {
		reply, err := d.nc.Request(a.subject, []byte(a.body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := reply.Header.Get("Nats-Service-Error-Code"); got != a.code || reply.Header.Get("Nats-Service-Error") == "" {
			t.Errorf("%s %.40s: answered code %q (%q), want %s", a.subject, a.body, got, reply.Header.Get("Nats-Service-Error"), a.code)
		}
	}
	for name, seq := range seqs {
		if turns := d.consumed("bad-"+name, seq); turns != 0 {
			t.Errorf("%s started %d turns", name, turns)
		}
	}
	// The node still takes good input.
	seq := d.send("good", "k1", []byte(`{"text":"hi"}`))
	d.committed("good", fmt.Sprintf("in-%d", seq))

	var q quarantine
	d.admin(&q, "quarantine", "ls")
	seen := map[string]string{}
	for _, m := range q.Quarantine {
		seen[m.Subject] = m.Reason
	}
	for name := range bad {
		if seen["lash.sess.bad-"+name+".in"] == "" {
			t.Errorf("%s is not in the quarantine: %+v", name, q)
		}
	}
	for name := range decide {
		if seen["lash.sess.bad-"+name+".decide"] == "" {
			t.Errorf("%s is not in the quarantine: %+v", name, q)
		}
	}
	if !strings.Contains(seen["lash.sess.bad-decision.in"], "decision subject") {
		t.Errorf("the reason of the decision on the input subject: %q", seen["lash.sess.bad-decision.in"])
	}
	if !strings.Contains(seen["lash.sess.bad-nocall.decide"], "holds none of the calls") {
		t.Errorf("the reason of the decision for no call: %q", seen["lash.sess.bad-nocall.decide"])
	}
	if seen["lash.signal.deploy.1"] == "" {
		t.Errorf("the signal is not in the quarantine: %+v", q)
	}
	refused := 0
	for _, m := range q.Quarantine {
		if m.Stream == "node-api" {
			refused++
		}
	}
	if refused != len(api) {
		t.Errorf("the quarantine shows %d refused API requests, want %d: %+v", refused, len(api), q)
	}
}

// lash-admin verify replays recorded turns under the settings each one ran
// with, read by the fingerprint its commit carries: it needs none of the
// node's flags. With --as-configured it replays them under the flags' own
// settings: a changed system prompt is reported with the request diff.
func TestVerifyDetectsNondeterminism(t *testing.T) {
	d := newDeployment(t)
	d.node("node-a", echoScript, "--system", "You are terse.")
	seq := d.send("s1", "k1", []byte(`{"text":"hi"}`))
	turnID := fmt.Sprintf("in-%d", seq)
	d.committed("s1", turnID)
	base := []string{"--nats", d.url, "--cache", filepath.Join(d.dir, "admin-cache")}
	out, errOut, code := run(t, "lash-admin", append(base, "verify", "s1")...)
	if code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("verify with the recorded settings: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, "lash-admin", append(base, "verify", "--as-configured", "--model", "scripted", "--system", "You are terse.", "s1")...)
	if code != 0 {
		t.Fatalf("verify with the node's settings: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, "lash-admin", append(base, "verify", "--as-configured", "--model", "scripted", "--system", "You are verbose.", "s1")...)
	if code != 1 || !strings.Contains(out, "- message 0 system: You are terse.") || !strings.Contains(out, "+ message 0 system: You are verbose.") {
		t.Fatalf("verify with another prompt: exit %d\n%s%s", code, out, errOut)
	}
	var st struct {
		Fingerprint string `json:"fingerprint"`
		Settings    struct {
			Model  string `json:"model"`
			System string `json:"system"`
		} `json:"settings"`
	}
	d.admin(&st, "settings", "s1", turnID)
	if st.Settings.System != "You are terse." || st.Settings.Model != "scripted" || len(st.Fingerprint) != 64 {
		t.Fatalf("settings of the turn: %+v", st)
	}
}
