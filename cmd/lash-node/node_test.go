package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// nodeScript parks calls on each built-in tool, or hangs, by what the user
// says; once a call has an answer the model finishes.
const nodeScript = `
rule approve
  when user contains deploy
  when tools = 0
  call wait_for_approval {"request":"deploy to production"}

rule nap
  when user contains nap
  when tools = 0
  call sleep {"seconds":0.1}

rule signal
  when user contains build
  when tools = 0
  call wait_for_signal {"name":"build.done"}

rule hang
  when user contains hang
  hang

default
  say Done.
`

// waitStatus polls a session's status until ok accepts it.
func waitStatus(t *testing.T, c *nodeapi.Client, session string, ok func(*nodeapi.Status) bool) *nodeapi.Status {
	t.Helper()
	var st *nodeapi.Status
	testenv.WaitFor(t, 20*time.Second, func() error {
		var err error
		st, err = c.Status(context.Background(), session)
		if err != nil {
			return err
		}
		if !ok(st) {
			return fmt.Errorf("status of %s: %+v", session, st)
		}
		return nil
	})
	return st
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// metricValue reads one sample of a Prometheus text exposition.
func metricValue(body, series string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// The default deployment, on the real binary: the embedded server with its
// client port, the node API, the built-in tools woken by decisions, timers
// and signals, tools served over NATS, /healthz and /metrics, a drain on
// SIGTERM, and a restart that finds everything in its data directory.
func TestNodeEmbedded(t *testing.T) {
	dir := t.TempDir()
	script := writeFile(t, "node.script", nodeScript)
	args := []string{"--script", script, "--data", dir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--log-format", "json", "--node-id", "e2e", "--tool-refresh", "100ms"}
	p := start(t, nil, args...)
	url, _ := p.log("embedded NATS with JetStream running")["url"].(string)
	addr, _ := p.log("serving /healthz and /metrics")["addr"].(string)
	p.log("lash-node running")
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || !strings.HasPrefix(addr, "http://127.0.0.1:") {
		t.Fatalf("nats %q, http %q", url, addr)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	c := nodeapi.NewClient(nc, "")

	// The node API is a micro service named lash, this node an instance.
	info, err := c.Info(ctx)
	if err != nil || info.Node != "e2e" || info.Version != "0.0.0-dev" {
		t.Fatalf("info %+v, %v", info, err)
	}
	ping, err := nc.Request("$SRV.PING.lash", nil, 5*time.Second)
	if err != nil || !strings.Contains(string(ping.Data), `"node":"e2e"`) {
		t.Fatalf("micro ping: %v %v", ping, err)
	}

	// A tool served over NATS is found by the next refresh.
	ledger, err := natstool.Serve(nc, "", micro.Config{Name: "ledger", Version: "1.0.0"}, natstool.Served{
		Name: "ledger_append", Description: "append to the ledger", Schema: []byte(`{"type":"object"}`),
		Handle: func(context.Context, natstool.Request) (string, error) { return "ok", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Stop()
	p.log("tool found")

	// A decision, a timer and a signal resume the three parked calls.
	for _, in := range []struct{ session, text string }{{"ops", "deploy please"}, {"nap", "take a nap"}, {"ci", "tell me when the build is done"}} {
		if _, err := c.Submit(ctx, nodeapi.SubmitRequest{Session: in.session, Key: "k1", Text: in.text}); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, c, "ops", func(s *nodeapi.Status) bool { return s.Turns == 1 && s.Suspended == 1 })
	waitStatus(t, c, "ci", func(s *nodeapi.Status) bool { return s.Turns == 1 && s.Suspended == 1 })
	if _, err := c.Decide(ctx, nodeapi.DecideRequest{Session: "ops", Key: "d1", CallID: "call_1", Action: "resume",
		Mode: "use-result", Payload: "approved"}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("lash.signal.build.done", []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	done := func(s *nodeapi.Status) bool { return s.Turns == 2 && s.Suspended == 0 && s.RunStatus == "done" }
	for _, sid := range []string{"ops", "nap", "ci"} {
		waitStatus(t, c, sid, done)
	}
	// A bad request is refused and counted.
	if _, err := c.Do(ctx, nodeapi.EndpointSubmit, []byte(`{"session":`)); !errors.Is(err, nodeapi.ErrBadRequest) {
		t.Errorf("bad request: %v", err)
	}

	// One follower of live events from a cursor is counted.
	sc, err := streams.Bind(ctx, nc, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- live.Follow(fctx, sc, "ops", 0, func(live.Record) error { return nil }) }()
	defer func() { stopFollow(); <-followed }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, body := get(t, addr+"/metrics")
		if n, ok := metricValue(body, "lash_live_followers"); ok && n == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("lash_live_followers = %v (found %v), want 1", n, ok)
		}
	}

	code, body := get(t, addr+"/healthz")
	if code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body = get(t, addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for series, want := range map[string]float64{
		"lash_turns_committed_total":                                                            6,
		"lash_wakes_total":                                                                      2,
		`lash_effects_executed_total{kind="llm-call"}`:                                          6,
		`lash_api_requests_total{code="200",endpoint="decide"}`:                                 1,
		`lash_api_requests_total{code="400",endpoint="submit"}`:                                 1,
		`lash_api_requests_total{code="200",endpoint="submit"}`:                                 3,
		`lash_node_info{incarnation="` + info.Incarnation + `",node="e2e",version="0.0.0-dev"}`: 1,
		"lash_tools": 9, // three built-in, five process tools, the ledger
	} {
		if got, ok := metricValue(body, series); !ok || got != want {
			t.Errorf("%s = %v (found %v), want %v", series, got, ok, want)
		}
	}
	for _, series := range []string{"lash_lease_claims_total", "lash_turn_duration_seconds_count", `lash_effect_duration_seconds_count{kind="tool-calls"}`, "go_goroutines", "lash_projection_applied_sequence"} {
		if v, ok := metricValue(body, series); !ok || v <= 0 {
			t.Errorf("%s = %v (found %v), want more than 0", series, v, ok)
		}
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	p.log("drained")

	// The data directory holds the deployment: a new node finds it.
	p2 := start(t, nil, args...)
	url2, _ := p2.log("embedded NATS with JetStream running")["url"].(string)
	nc2, err := nats.Connect(url2)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	st := waitStatus(t, nodeapi.NewClient(nc2, ""), "ops", done)
	if st.Inputs != 2 {
		t.Errorf("after a restart: %+v", st)
	}
	p2.signal(syscall.SIGINT)
	if code := p2.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGINT", code)
	}
}

// heldLease waits until a session lease of the deployment is held and
// returns it.
func heldLease(t *testing.T, nc *nats.Conn) leases.Holder {
	t.Helper()
	c, err := streams.Open(context.Background(), nc, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := leases.New(c, leases.LocalOwner("test"))
	var held leases.Holder
	testenv.WaitFor(t, 20*time.Second, func() error {
		hs, err := m.List(context.Background(), "sess.")
		if err != nil {
			return err
		}
		if len(hs) == 0 {
			return errors.New("no session lease held")
		}
		held = hs[0]
		return nil
	})
	return held
}

// SIGTERM drains a node joined to an existing NATS: its running turn,
// stopped at the drain deadline, releases its lease at once (long before
// its TTL); the node exits 0.
func TestSIGTERMDrainReleasesLease(t *testing.T) {
	srv := testenv.RunJetStream(t)
	script := writeFile(t, "node.script", nodeScript)
	p := start(t, []string{"NATS_URL=" + srv.URL(), "LASH_DRAIN_TIMEOUT=200ms", "LASH_LEASE_TTL=60s"},
		"--script", script, "--data", t.TempDir(), "--http", "off", "--log-format", "json", "--node-id", "drainer")
	p.log("lash-node running")
	nc := srv.Conn(t)
	c := nodeapi.NewClient(nc, "")
	if _, err := c.Submit(context.Background(), nodeapi.SubmitRequest{Session: "slow", Key: "k1", Text: "hang on"}); err != nil {
		t.Fatal(err)
	}
	held := heldLease(t, nc)
	if held.Owner.ID != "drainer" {
		t.Fatalf("lease held by %+v", held.Owner)
	}
	began := time.Now()
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	p.log("drain deadline passed: running turns were stopped; another node finishes them by replay")
	// Released, not expired: the TTL is a minute.
	st, err := streams.Open(context.Background(), nc, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := leases.New(st, leases.LocalOwner("test")).List(context.Background(), "sess.")
	if err != nil || len(hs) != 0 {
		t.Errorf("leases after the drain: %+v, %v", hs, err)
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("drain took %s", took)
	}
}

// A second signal during the drain exits at once with status 1.
func TestSecondSignalExits1(t *testing.T) {
	srv := testenv.RunJetStream(t)
	script := writeFile(t, "node.script", nodeScript)
	p := start(t, []string{"NATS_URL=" + srv.URL()},
		"--script", script, "--data", t.TempDir(), "--http", "off", "--log-format", "json", "--drain-timeout", "1h")
	p.log("lash-node running")
	nc := srv.Conn(t)
	if _, err := nodeapi.NewClient(nc, "").Submit(context.Background(), nodeapi.SubmitRequest{Session: "slow", Key: "k1", Text: "hang on"}); err != nil {
		t.Fatal(err)
	}
	heldLease(t, nc)
	p.signal(syscall.SIGINT)
	p.log("draining")
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 1 {
		t.Fatalf("exit status %d after a second signal, want 1", code)
	}
	if !strings.Contains(p.stderr(), "lash-node: terminated again: exiting at once") {
		t.Errorf("stderr:\n%s", p.stderr())
	}
}

// A second node on the same --data stops before it starts a server on the
// first one's JetStream files.
func TestDataDirectoryIsLocked(t *testing.T) {
	dir := t.TempDir()
	script := writeFile(t, "node.script", nodeScript)
	p := start(t, nil, "--script", script, "--data", dir, "--listen", "127.0.0.1:0", "--http", "off", "--log-format", "json")
	p.log("lash-node running")
	code, _, stderr := runOnce(t, nil, "--script", script, "--data", dir, "--listen", "127.0.0.1:0", "--http", "off")
	if code != 1 || !strings.Contains(stderr, "another lash-node uses --data") || strings.Contains(stderr, "embedded NATS") {
		t.Fatalf("second node on the same data: exit %d\n%s", code, stderr)
	}
	// The refused node left the first one's lock file alone; the first
	// removes it when it stops.
	lock := filepath.Join(dir, "lash-node.lock")
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("lock file after the refusal: %v", err)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after a drain: %v", err)
	}
}

// A start that fails after the node locked its data directory leaves no
// lock file behind.
func TestFailedStartRemovesLock(t *testing.T) {
	script := writeFile(t, "node.script", nodeScript)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unreachable NATS", []string{"--nats", "nats://127.0.0.1:1"}, "connect to NATS at nats://127.0.0.1:1"},
		{"embedded server port in use", []string{"--listen", busy.Addr().String()}, "address already in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"--script", script, "--data", dir, "--http", "off", "--log-format", "json"}, c.args...)
			code, _, stderr := runOnce(t, nil, args...)
			if code != 1 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, want 1 with %q\n%s", code, c.want, stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "lash-node.lock")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("lock file after a failed start: %v", err)
			}
		})
	}
}

// runInProcess runs lash-node's run in this process with args (and
// whatever LASH_ environment the test has: the tests set none) and returns
// a channel that receives its exit status, and its stderr.
func runInProcess(t *testing.T, ctx context.Context, args ...string) (<-chan int, *testenv.Buffer) {
	t.Helper()
	var stdout, stderr testenv.Buffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, args, &stdout, &stderr) }()
	return code, &stderr
}

// exitWithin waits for run's exit status.
func exitWithin(t *testing.T, code <-chan int, stderr *testenv.Buffer, timeout time.Duration) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(timeout):
		t.Fatalf("lash-node still running after %s; stderr:\n%s", timeout, stderr)
		return 0
	}
}

// A node whose NATS connection is closed for good drains and exits 1,
// saying why; a node that closes its connection in a drain exits 0.
//
// The server takes the node's password away: ReloadOptions disconnects the
// clients whose credentials no longer hold, and nats.go closes the
// connection for good when the server refuses its reconnect twice.
func TestNATSClosedForGoodExits1(t *testing.T) {
	srv := testenv.RunJetStream(t, testenv.WithOptions(func(o *server.Options) {
		o.Username, o.Password = "lash", "old"
	}))
	script := writeFile(t, "node.script", nodeScript)
	secret := writeFile(t, "secret", strings.Repeat("s", 32)) // both runs are nodes of one deployment
	args := func() []string {
		return []string{"--script", script, "--nats", srv.URL(), "--user", "lash", "--password", "old",
			"--data", t.TempDir(), "--secret-file", secret, "--http", "off", "--log-format", "json", "--drain-timeout", "5s"}
	}
	running := func(stderr *testenv.Buffer) {
		t.Helper()
		testenv.WaitFor(t, 20*time.Second, func() error {
			if !strings.Contains(stderr.String(), `"msg":"lash-node running"`) {
				return errors.New("lash-node not running yet")
			}
			return nil
		})
	}

	t.Run("drain", func(t *testing.T) {
		ctx, drain := context.WithCancel(context.Background())
		defer drain()
		code, stderr := runInProcess(t, ctx, args()...)
		running(stderr)
		drain()
		if c := exitWithin(t, code, stderr, 30*time.Second); c != 0 || strings.Contains(stderr.String(), "closed for good") {
			t.Fatalf("exit status %d after a drain, want 0; stderr:\n%s", c, stderr)
		}
	})

	ctx, drain := context.WithCancel(context.Background())
	defer drain()
	code, stderr := runInProcess(t, ctx, args()...)
	running(stderr)
	srv.Reload(func(o *server.Options) { o.Password = "new" })
	if c := exitWithin(t, code, stderr, 30*time.Second); c != 1 {
		t.Fatalf("exit status %d after the password changed, want 1; stderr:\n%s", c, stderr)
	}
	var stopped map[string]any
	for _, line := range strings.Split(stderr.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "lash-node stopped" {
			stopped = m
		}
	}
	if err, _ := stopped["err"].(string); !strings.HasPrefix(err, "NATS connection closed for good: ") ||
		!strings.Contains(strings.ToLower(err), "authorization violation") {
		t.Errorf("lash-node stopped with %q; stderr:\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), `"msg":"drained"`) {
		t.Errorf("no drain; stderr:\n%s", stderr)
	}
}
