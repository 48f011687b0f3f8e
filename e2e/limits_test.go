package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// startNode starts a lash-node joined to the deployment with the given
// model and other settings (no --script).
func (d *deployment) startNode(id string, extra ...string) *proc {
	d.t.Helper()
	args := append([]string{"--nats", d.url, "--node-id", id, "--data", filepath.Join(d.dir, id), "--http", "off",
		"--lease-ttl", "2s", "--tool-refresh", "500ms", "--log-format", "text", "--replicas", fmt.Sprint(max(d.replicas, 1))}, extra...)
	p := start(d.t, id, "lash-node", args...)
	p.waitLine("lash-node running", 30*time.Second)
	d.waitNode(id)
	return p
}

// waitPending waits until a turn of session has recorded a pending call:
// it waits for a decision, every effect before it recorded.
func (d *deployment) waitPending(session, turnID string) {
	d.t.Helper()
	testenv.WaitFor(d.t, 60*time.Second, func() error {
		var ef effects
		if err := d.tryAdmin(&ef, "effects", session, turnID); err != nil {
			return err
		}
		for _, e := range ef.Effects {
			if strings.HasPrefix(e.Summary, "pending") {
				return nil
			}
		}
		return fmt.Errorf("the approval call is not recorded yet")
	})
}

// watch records the subjects of messages on the server that hold marker
// in their subject or payload, other than the given subjects and replies to
// inboxes (deliveries of the message itself, answers to reads): what a
// node would have derived from it, a log entry, a lease key, a journal
// record, a read of its log, would show here.
func watch(t *testing.T, nc *nats.Conn, marker string, except ...string) func() []string {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	// A callback runs after the connection has read its message; the
	// fence, published after everything asked about, says when the
	// callbacks before it have run.
	fence := nats.NewInbox() + ".fence"
	fenced := make(chan struct{}, 1)
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		if m.Subject == fence {
			fenced <- struct{}{}
			return
		}
		if !strings.Contains(m.Subject, marker) && !bytes.Contains(m.Data, []byte(marker)) ||
			strings.HasPrefix(m.Subject, "_INBOX.") || slices.Contains(except, m.Subject) {
			return
		}
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%.60s: %.80q", m.Subject, m.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []string {
		if err := nc.Publish(fence, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-fenced:
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not see its own fence")
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// Ids of 4 KiB, 64 KiB and one byte over the bound, on a session's input
// subject and through the node API: the node stays connected and serves
// the next good input, the messages are in the quarantine, and nothing
// derived from them is published. Until this held, the node's own next
// publish named the id and the server closed its connection for good.
func TestLongIDs(t *testing.T) {
	testLongIDs(t, newDeployment(t, testenv.WithLimits(256<<10, 0)))
}

// The same on a 3-server cluster with replicated streams.
func TestClusterLongIDs(t *testing.T) {
	testLongIDs(t, newClusterDeployment(t, testenv.WithLimits(256<<10, 0)))
}

func testLongIDs(t *testing.T, d *deployment) {
	node := d.node("node-a", echoScript)
	// 64 KB, not KiB: nats-server's file store keeps a subject's length in
	// 16 bits, so a subject of 64 KiB or more is stored cut short (its end
	// read as payload), whatever its client or lash does.
	ids := []string{strings.Repeat("a", 4<<10), strings.Repeat("b", 64000), strings.Repeat("c", 257)}
	// The hostile client's connection may send long lines: the server
	// allows it, as a deployment that raised max_control_line would.
	client, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var seen []func() []string
	for _, id := range ids {
		seen = append(seen, watch(t, d.nc, id[:64], "lash.sess."+id+".in", "lash.api.submit"))
	}
	for i, id := range ids {
		m := nats.NewMsg("lash.sess." + id + ".in")
		m.Header.Set("Nats-Msg-Id", fmt.Sprintf("long-%d", i))
		m.Data = []byte(`{"text":"hi"}`)
		reply, err := client.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("publish with an id of %d bytes: %v", len(id), err)
		}
		if !bytes.Contains(reply.Data, []byte(`"seq"`)) {
			t.Fatalf("publish with an id of %d bytes: %s", len(id), reply.Data)
		}
	}
	// The node API refuses them before anything is derived.
	for _, id := range ids {
		body, _ := json.Marshal(map[string]string{"session": id, "key": "k", "text": "hi"})
		reply, err := client.Request("lash.api.submit", body, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if reply.Header.Get("Nats-Service-Error-Code") != "400" {
			t.Fatalf("submit with a session of %d bytes: %q", len(id), reply.Header.Get("Nats-Service-Error"))
		}
	}
	seq := d.send("after", "k1", []byte(`{"text":"hi"}`))
	d.committed("after", fmt.Sprintf("in-%d", seq))
	select {
	case <-node.done:
		t.Fatalf("lash-node exited: %v", node.err)
	default:
	}
	if n := node.count("NATS connection closed"); n != 0 {
		t.Fatalf("lash-node lost its connection")
	}
	var q quarantine
	testenv.WaitFor(t, 30*time.Second, func() error {
		q = quarantine{}
		if err := d.tryAdmin(&q, "quarantine", "ls"); err != nil {
			return err
		}
		found := 0
		for _, id := range ids {
			for _, m := range q.Quarantine {
				if m.Subject == "lash.sess."+id+".in" && strings.Contains(m.Reason, "invalid id") {
					found++
				}
			}
		}
		if found != len(ids) {
			return fmt.Errorf("%d of %d in the quarantine: %d entries", found, len(ids), len(q.Quarantine))
		}
		return nil
	})
	// Nothing was derived from the ids: no fence, lease, journal record,
	// wake or read of a log they would name.
	for i, s := range seen {
		if got := s(); len(got) != 0 {
			t.Errorf("id %d of %d bytes: %d messages derived from it: %q", i, len(ids[i]), len(got), got)
		}
	}
}

// A turn whose tool results total 5 MiB and whose model answer is 2 MiB
// commits, and replays after a SIGKILL of its node without calling the model
// or the tool again; lash-admin transcript shows the content. A model answer
// over the deployment's payload ceiling is recorded as a failed call, once.
func TestLargePayloadsSurviveKill(t *testing.T) {
	d := newDeployment(t)
	const chunk = 512 << 10
	answer := strings.Repeat("the long answer ", 2<<20/16)
	// Over the 3 MiB ceiling below. The model server streams a chunk a
	// word: long words keep it to thousands of chunks, not a million, which
	// under the race detector take longer than the wait for the turn.
	huge := strings.Repeat(strings.Repeat("h", 1023)+" ", 4<<10)
	var calls strings.Builder
	for i := range 10 {
		fmt.Fprintf(&calls, "  call blob {\"n\":%d}\n", i)
	}
	script := "rule fetch\n  when user contains fetch\n  when tools = 0\n" + calls.String() +
		"\nrule park\n  when user contains fetch\n  when tools = 10\n  say " + answer + "\n  call wait_for_approval {\"request\":\"done?\"}\n" +
		"\nrule huge\n  when user contains huge\n  say " + huge + "\n\ndefault\n  say ok\n"
	models := testenv.RunModelServer(t, scripted.MustParse(script))
	var runs atomic.Int32
	srv, err := natstool.Serve(d.nc, "lash", micro.Config{Name: "blobs", Version: "1.0.0"}, natstool.Served{
		Name: "blob", Description: "a large result", Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		Handle: func(ctx context.Context, req natstool.Request) (string, error) {
			var a struct {
				N int `json:"n"`
			}
			if err := json.Unmarshal(req.Args, &a); err != nil {
				return "", err
			}
			runs.Add(1)
			return strings.Repeat(fmt.Sprint(a.N%10), chunk), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Stop() }()
	model := []string{"--base-url", models.URL(), "--model", "scripted", "--decision-wait", "6s"}
	a := d.startNode("node-a", model...)
	seq := d.send("big", "k1", []byte(`{"text":"fetch"}`))
	turnID := fmt.Sprintf("in-%d", seq)
	// Kill node-a while its turn waits for the decision, after the large
	// answer and every result were recorded, before the commit.
	d.waitPending("big", turnID)
	a.kill()
	asked := models.Requests()
	if runs.Load() != 10 || asked != 2 {
		t.Fatalf("before the replay: %d tool runs, %d model requests", runs.Load(), asked)
	}
	d.startNode("node-b", model...)
	ts := d.committed("big", turnID)
	if tt := ts.Turns[0]; tt.Status != "waiting" {
		t.Fatalf("turn %+v", tt)
	}
	if runs.Load() != 10 || models.Requests() != asked {
		t.Fatalf("the replay ran the tool %d times more and asked the model %d times more", runs.Load()-10, models.Requests()-asked)
	}
	var tr struct {
		Messages []struct {
			Role string `json:"role"`
			Text string `json:"text"`
		} `json:"messages"`
	}
	d.admin(&tr, "transcript", "big")
	total, said := 0, false
	for _, m := range tr.Messages {
		if m.Role == "tool" && len(m.Text) == chunk {
			total += len(m.Text)
		}
		said = said || m.Role == "assistant" && m.Text == strings.TrimSpace(answer)
	}
	if total != 10*chunk || !said {
		t.Fatalf("transcript: %d bytes of results, the answer shown %v", total, said)
	}
	// Over the ceiling (another deployment with 3 MiB): one model call,
	// recorded as failed.
	c := start(t, "node-c", "lash-node", append([]string{"--nats", d.url, "--node-id", "node-c", "--data", filepath.Join(d.dir, "node-c"),
		"--http", "off", "--prefix", "small", "--max-payload", "3MiB"}, model...)...)
	c.waitLine("lash-node running", 30*time.Second)
	asked = models.Requests()
	m := nats.NewMsg("small.sess.huge.in")
	m.Header.Set("Nats-Msg-Id", "huge-1")
	m.Data = []byte(`{"text":"huge"}`)
	if _, err := d.nc.RequestMsg(m, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, func() error {
		var ts turns
		if err := d.tryAdmin(&ts, "--prefix", "small", "turns", "huge"); err != nil {
			return err
		}
		if len(ts.Turns) != 1 {
			return fmt.Errorf("turns %+v", ts)
		}
		if tt := ts.Turns[0]; tt.Termination.Reason != "error" || !strings.Contains(tt.Termination.Detail, "answer_too_large") {
			t.Fatalf("turn over the ceiling: %+v", tt)
		}
		return nil
	})
	if models.Requests() != asked+1 {
		t.Fatalf("the answer over the ceiling was asked for %d times", models.Requests()-asked)
	}
}

// A provider error that echoes the request's credentials reaches no stream,
// projection, log or lash-admin output.
func TestSecretsNeverStored(t *testing.T) {
	d := newDeployment(t)
	const key = "sk-marker-4f1c9e2a7b3d"
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		msg := fmt.Sprintf("bad credentials: Authorization: %s (key %s)", r.Header.Get("Authorization"), key)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "code": "invalid_api_key"}})
	}))
	defer model.Close()
	args := []string{"--nats", d.url, "--node-id", "node-a", "--data", filepath.Join(d.dir, "node-a"), "--http", "off",
		"--lease-ttl", "2s", "--log-format", "text", "--log-level", "debug", "--base-url", model.URL + "/v1", "--model", "m1"}
	p := startEnv(t, "node-a", []string{"OPENAI_API_KEY=" + key}, "lash-node", args...)
	p.waitLine("lash-node running", 30*time.Second)
	seq := d.send("s", "k1", []byte(`{"text":"hi"}`))
	ts := d.committed("s", fmt.Sprintf("in-%d", seq))
	if tt := ts.Turns[0]; tt.Termination.Reason != "error" || !strings.Contains(tt.Termination.Detail, "[redacted]") {
		t.Fatalf("turn %+v", tt)
	}
	var leaks []string
	// Every message of every stream of the deployment.
	js, err := jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	names := js.StreamNames(context.Background())
	for name := range names.Name() {
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(context.Background(), seq)
			if err != nil {
				continue // deleted
			}
			if bytes.Contains(m.Data, []byte(key)) || strings.Contains(fmt.Sprint(m.Header), key) {
				leaks = append(leaks, fmt.Sprintf("stream %s seq %d", name, seq))
			}
		}
	}
	// lash-admin's reads, which fill its cache too.
	for _, cmd := range [][]string{{"sessions", "ls"}, {"sessions", "show", "s"}, {"turns", "s"}, {"transcript", "s"},
		{"effects", "s", fmt.Sprintf("in-%d", seq)}, {"quarantine", "ls"}} {
		for _, form := range [][]string{{"--json"}, nil} {
			out, errOut, _ := run(t, "lash-admin", append(append([]string{"--nats", d.url, "--cache", filepath.Join(d.dir, "admin-cache")}, form...), cmd...)...)
			if strings.Contains(out+errOut, key) {
				leaks = append(leaks, fmt.Sprintf("lash-admin %v", cmd))
			}
		}
	}
	if strings.Contains(strings.Join(p.lines(), "\n"), key) {
		leaks = append(leaks, "lash-node's log")
	}
	// The projections on disk: the node's and lash-admin's.
	p.signal(15, 30*time.Second)
	err = filepath.Walk(d.dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(key)) {
			leaks = append(leaks, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(leaks) != 0 {
		t.Fatalf("the key leaked into: %q", leaks)
	}
}
