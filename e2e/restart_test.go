package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// countTool is a tool served over NATS from this test process, as a tool
// server elsewhere would: several instances (each runs one call at a
// time), each on a connection of its own with nats.go's default reconnect
// settings. It notes when each call begins and ends, by idempotency key.
type countTool struct {
	mu     sync.Mutex
	begins []call
	ends   []call
}

type call struct {
	key     string
	attempt int
	inDoubt bool
	at      time.Time
}

// serveCount serves the tool name on url from n instances; each call
// takes delay.
func serveCount(t testing.TB, url, name string, n int, delay time.Duration) *countTool {
	return serveGated(t, url, name, n, delay, nil)
}

// serveGated is serveCount whose calls, when gate is not nil, also wait
// for gate to close.
func serveGated(t testing.TB, url, name string, n int, delay time.Duration, gate <-chan struct{}) *countTool {
	t.Helper()
	c := &countTool{}
	for i := range n {
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("%s-%d", name, i)), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		svc, err := natstool.Serve(nc, "lash", micro.Config{Name: name, Version: "1.0.0"}, natstool.Served{
			Name: name, Description: "counts what it is given", Schema: json.RawMessage(`{"type":"object"}`),
			Handle: func(ctx context.Context, req natstool.Request) (string, error) {
				c.note(&c.begins, req)
				select {
				case <-time.After(delay): // the work
				case <-ctx.Done():
					return "", ctx.Err()
				}
				if gate != nil {
					<-gate
				}
				c.note(&c.ends, req)
				return "ok", nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
	}
	return c
}

func (c *countTool) note(list *[]call, req natstool.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*list = append(*list, call{key: req.IdempotencyKey, attempt: req.Attempt, inDoubt: req.InDoubt, at: time.Now()})
}

func (c *countTool) calls() (begins, ends []call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]call(nil), c.begins...), append([]call(nil), c.ends...)
}

// begunAfter counts the calls with key begun after t.
func begunAfter(begins []call, key string, t time.Time) int {
	n := 0
	for _, b := range begins {
		if b.key == key && b.at.After(t) {
			n++
		}
	}
	return n
}

const countScript = `
rule child-tool
  when user contains count it
  when tools = 0
  call t_count {"entry":"child"}

rule child-answer
  when user contains count it
  when tools = 1
  say the count is in

rule spawn
  when user contains ask a helper
  when tools = 0
  call spawn_agent {"task":"count it","name":"helper"}

rule await
  when user contains ask a helper
  when tools = 1
  call process_await {"process":"helper"}

rule done
  when tool contains the count is in
  say the helper counted

default
  say noted
`

type processList struct {
	Processes []struct {
		ID       string `json:"id"`
		Status   string `json:"status"`
		Attempts int    `json:"attempts"`
		Kind     string `json:"kind"`
		Error    string `json:"error"`
	} `json:"processes"`
}

// A node on its embedded server is SIGKILLed while 10 processes, 30
// trigger deliveries and 5 sub-agents call a tool served over NATS, and
// started again on its data. Its tool's servers reconnect only after the
// node runs again (nats.go's default wait of 2 s), so the node resumes
// work before it has found the tool: none of it fails as an unknown tool,
// everything completes, and no call whose outcome was recorded before the
// kill runs again.
func TestRestartResumesBeforeToolsReturn(t *testing.T) {
	dir := t.TempDir()
	d := &deployment{t: t, dir: dir}
	port := freePort(t)
	d.url = "nats://127.0.0.1:" + port
	script := d.file("count.script", countScript)
	args := []string{"--script", script, "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:" + port, "--http", "off",
		"--node-id", "solo", "--log-format", "text", "--tool-refresh", "500ms"}
	node := start(t, "solo", "lash-node", args...)
	node.waitLine("lash-node running", 30*time.Second)
	first := incarnation(t, node)
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d.nc = nc
	tool := serveCount(t, d.url, "t_count", 16, 2*time.Second)
	node.waitLine("tool found", 30*time.Second)

	d.admin(&struct{}{}, "triggers", "register", "counts", "--source", "count.>", "--tool", "t_count")
	api := nodeapi.NewClient(nc, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 10 {
		if _, err := api.ProcessStart(ctx, nodeapi.ProcessStartRequest{ID: fmt.Sprint("bg-", i), Tool: "t_count", Args: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		m := nats.NewMsg(fmt.Sprintf("lash.signal.count.%d", i))
		m.Header.Set("Nats-Msg-Id", fmt.Sprint("count-", i))
		m.Data = []byte(`{}`)
		if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		d.send(fmt.Sprint("lead-", i), "k1", []byte(`{"text":"ask a helper"}`))
	}
	// Killed with calls in flight and some recorded.
	var before processList
	testenv.WaitFor(t, 60*time.Second, func() error {
		begins, ends := tool.calls()
		if len(ends) < 12 || len(begins)-len(ends) < 8 {
			return fmt.Errorf("%d calls begun, %d ended", len(begins), len(ends))
		}
		return d.tryAdmin(&before, "processes", "ls")
	})
	node.kill()
	killed := time.Now()
	node = start(t, "solo", "lash-node", args...)

	var after processList
	var bad string // a process that ended otherwise: no use waiting for the rest
	testenv.WaitFor(t, 2*time.Minute, func() error {
		after = processList{}
		if err := d.tryAdmin(&after, "processes", "ls"); err != nil {
			return err
		}
		done := 0
		for _, p := range after.Processes {
			if p.Status == "failed" || p.Status == "abandoned" || p.Status == "cancelled" {
				bad = fmt.Sprintf("process %s ended %s: %s", p.ID, p.Status, p.Error)
				return nil
			}
			if p.Status == "completed" {
				done++
			}
		}
		if len(after.Processes) != 45 || done != 45 {
			return fmt.Errorf("%d processes, %d completed; want 45 (10, 30 deliveries, 5 sub-agents)", len(after.Processes), done)
		}
		return nil
	})
	if bad != "" {
		t.Fatal(bad)
	}
	for i := range 5 {
		for _, m := range d.waitAnswer(fmt.Sprint("lead-", i), "the helper counted") {
			if strings.Contains(m.Text, "unknown tool") {
				t.Fatalf("lead-%d heard of an unknown tool: %q", i, m.Text)
			}
		}
	}
	begins, _ := tool.calls()
	// A process completed before the kill never ran its tool again.
	recorded := 0
	for _, p := range before.Processes {
		if p.Status != "completed" || p.Kind != "tool_call" {
			continue
		}
		recorded++
		key := "/proc:" + p.ID + "/0/tool-call/0/" + p.ID
		if n := begunAfter(begins, key, killed); n != 0 {
			t.Errorf("process %s completed before the kill; its tool ran %d times after", p.ID, n)
		}
	}
	if recorded == 0 {
		t.Fatal("no process had completed before the kill: the test shows nothing about recorded outcomes")
	}
	// Nor did a sub-agent's recorded tool call.
	for i := range 5 {
		lead := fmt.Sprint("lead-", i)
		var helper string
		var own processList
		d.admin(&own, "processes", "ls", "--session", lead)
		for _, p := range own.Processes {
			if p.Kind == "session_turn" {
				helper = p.ID
			}
		}
		if helper == "" {
			t.Fatalf("no sub-agent of %s among %+v", lead, own.Processes)
		}
		var ts turns
		d.admin(&ts, "turns", helper)
		for _, tn := range ts.Turns {
			var ef effects
			d.admin(&ef, "effects", helper, tn.Turn)
			for _, e := range ef.Effects {
				// Recorded by the first run, before the kill: never begun again.
				if e.Kind == "tool_call" && strings.HasSuffix(e.Recorder, "/"+first) && begunAfter(begins, e.Key, killed) != 0 {
					t.Errorf("%s's tool call %s was recorded by %s before the kill and ran again", helper, e.Key, e.Recorder)
				}
			}
		}
	}
	if !strings.Contains(strings.Join(node.lines(), "\n"), "tool found") {
		t.Fatal("the restarted node never found the tool")
	}
}

// incarnation is the incarnation a running node's log names.
func incarnation(t *testing.T, p *proc) string {
	t.Helper()
	for _, l := range p.lines() {
		if !strings.Contains(l, "lash-node running") {
			continue
		}
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "incarnation="); ok {
				return v
			}
		}
	}
	t.Fatalf("%s logged no incarnation", p.name)
	return ""
}
