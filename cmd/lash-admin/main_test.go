package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/leases"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

const script = `
rule transfer
  when user contains transfer
  when tools = 0
  call transfer {"to":"bob","amount":100}
  usage 20 10

rule weather
  when user contains weather
  when tools = 0
  call weather {"city":"Oslo"}
  usage 40 30

default
  say Done.
  usage 10 5
`

const system = "You are a test agent."

// registry holds a weather tool and a transfer tool that waits for an
// approval.
func registry(t *testing.T) *tools.Registry {
	reg := tools.New()
	weather, err := tools.Func("weather", "current weather of a city", func(ctx context.Context, a struct {
		City string `json:"city"`
	}) (string, error) {
		return "2C snow", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	transfer, err := tools.Func("transfer", "send money", func(ctx context.Context, a struct {
		To     string `json:"to"`
		Amount int    `json:"amount"`
	}) (string, error) {
		return "", tools.Pending("approve the transfer?")
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []tools.Tool{weather, transfer} {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// buildAdmin builds lash-admin into dir. It is built without the race
// detector even under -race: a race-enabled binary takes a second to start
// on some kernels, and the test runs it many times.
func buildAdmin(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "lash-admin")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// admin runs the binary against one deployment.
type admin struct {
	t     *testing.T
	bin   string
	url   string
	cache string
	env   []string // on top of a clean environment
}

type result struct {
	code           int
	stdout, stderr string
}

// cleanEnv is the test's environment without lash's settings, with the
// user cache and temporary directories inside the test's.
func cleanEnv(t *testing.T) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LASH_") && !strings.HasPrefix(kv, "NATS_URL=") &&
			!strings.HasPrefix(kv, "XDG_CACHE_HOME=") && !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	return append(env, "XDG_CACHE_HOME="+t.TempDir(), "TMPDIR="+t.TempDir())
}

// run runs lash-admin with the deployment's URL and cache, then args.
func (a *admin) run(args ...string) result {
	a.t.Helper()
	return a.runIn(nil, append([]string{"--nats", a.url, "--cache", a.cache}, args...)...)
}

func (a *admin) runIn(stdin io.Reader, args ...string) result {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.bin, args...)
	cmd.Env = append(cleanEnv(a.t), a.env...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		a.t.Fatalf("lash-admin %q: %v", args, err)
	}
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ok runs a command that must succeed.
func (a *admin) ok(args ...string) string {
	a.t.Helper()
	r := a.run(args...)
	if r.code != 0 {
		a.t.Fatalf("lash-admin %q: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// json runs a command with --json and decodes its output into v.
func (a *admin) json(v any, args ...string) {
	a.t.Helper()
	out := a.ok(append(args, "--json")...)
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		a.t.Fatalf("lash-admin %q --json: %v\n%s", args, err, out)
	}
	if dec.More() {
		a.t.Fatalf("lash-admin %q --json printed more than one document:\n%s", args, out)
	}
}

// fails runs a command that must fail with code and a one-line error
// containing want, and change nothing durable.
func (a *admin) fails(code int, want string, args ...string) {
	a.t.Helper()
	r := a.run(args...)
	if r.code != code || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
		a.t.Fatalf("lash-admin %q: exit %d, want %d with %q\nstdout: %s\nstderr: %s", args, r.code, code, want, r.stdout, r.stderr)
	}
}

// contains checks a table's output.
func contains(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// seed runs a deployment: session s1 answered after a weather call, s2
// waiting on the approval of a transfer, a malformed input for session x,
// a signal that is not JSON, a lease held by another owner, and a live
// node.
func seed(t *testing.T, srv *testenv.Server) (*lash.Node, *streams.Client) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := lash.Open(ctx, lash.WithConn(srv.Conn(t)), lash.WithNodeID("node-a"), lash.WithLogger(quiet),
		lash.WithModel(scripted.NewModel(scripted.MustParse(script))), lash.WithTools(registry(t)),
		lash.WithMachine(turn.Config{Model: "scripted", System: system}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	for _, s := range []struct{ id, text string }{{"s1", "weather in Oslo?"}, {"s2", "transfer 100 to bob"}} {
		if _, _, err := n.Session(s.id).Send(ctx, "k-"+s.id, lash.Input{Text: s.text}); err != nil {
			t.Fatal(err)
		}
		if res, err := n.Session(s.id).Run(ctx); err != nil || len(res) != 1 {
			t.Fatalf("%s: %+v %v", s.id, res, err)
		}
	}
	c := n.Streams()
	for subj, data := range map[string]string{"lash.sess.x.in": `{"nope":1}`, "lash.signal.deploy.1": "not json"} {
		if _, _, err := c.Publish(ctx, streams.Publication{Subject: subj, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	m := leases.New(c, leases.Owner{ID: "holder", Incarnation: "inc-1", Host: "h1", PID: 42})
	if _, err := m.Claim(ctx, "sess.s9", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return n, c
}

func lastSeq(t *testing.T, c *streams.Client, s streams.Stream) uint64 {
	t.Helper()
	seq, err := c.LastSeq(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// The binary against a seeded deployment: every read in JSON and as a
// table, the writes and their refusals, the cache's fallbacks, rebuild and
// verify.
func TestAdmin(t *testing.T) {
	srv := testenv.RunJetStream(t)
	node, c := seed(t, srv)
	ctx := context.Background()
	a := &admin{t: t, bin: buildAdmin(t, t.TempDir()), url: srv.URL(), cache: filepath.Join(t.TempDir(), "cache")}

	var sessions sessionsJSON
	a.json(&sessions, "sessions", "ls", "--sort", "id")
	if len(sessions.Sessions) != 2 {
		t.Fatalf("sessions %+v", sessions)
	}
	s1, s2 := sessions.Sessions[0], sessions.Sessions[1]
	if s1.State != "idle" || s2.State != "waiting" || s1.Created.IsZero() || s1.Active.Before(s1.Created) || !s2.Active.After(s1.Active) {
		t.Errorf("states and times: %+v", sessions)
	}
	// The most recently active first; one state; pages.
	var byActivity, waiting, page sessionsJSON
	a.json(&byActivity, "sessions", "ls")
	a.json(&waiting, "sessions", "ls", "--state", "waiting")
	a.json(&page, "sessions", "ls", "--limit", "1", "--after", "s2")
	if len(byActivity.Sessions) != 2 || byActivity.Sessions[0].Session != "s2" || len(waiting.Sessions) != 1 ||
		waiting.Sessions[0].Session != "s2" || len(page.Sessions) != 1 || page.Sessions[0].Session != "s1" || page.Next != "" {
		t.Errorf("by activity %+v\nwaiting %+v\npage after s2 %+v", byActivity, waiting, page)
	}
	a.fails(2, "--state", "sessions", "ls", "--state", "sleepy")
	if s1.Session != "s1" || s1.Turns != 1 || s1.Status != "done" || s1.Termination.Reason != "natural-end" ||
		s1.Usage != (usageJSON{InputTokens: 50, OutputTokens: 35, TotalTokens: 85}) || s1.Messages != 4 || s1.PendingInputs != 0 {
		t.Errorf("s1 %+v", s1)
	}
	if s2.Session != "s2" || s2.Status != "waiting" || s2.Suspended != 1 || s2.LastTurn == "" {
		t.Errorf("s2 %+v", s2)
	}

	var show sessionShowJSON
	a.json(&show, "sessions", "show", "s2")
	if show.Session != "s2" || show.Revision == 0 || show.Fence == 0 || len(show.SuspendedCalls) != 1 || len(show.Pending) != 0 {
		t.Fatalf("show %+v", show)
	}
	want := suspendedJSON{CallID: "call_1", Tool: "transfer", Arguments: `{"to":"bob","amount":100}`,
		Ticket: ticketJSON{Reason: "approve the transfer?"}, Iteration: show.SuspendedCalls[0].Iteration}
	if show.SuspendedCalls[0] != want {
		t.Errorf("suspended %+v, want %+v", show.SuspendedCalls[0], want)
	}

	var tr transcriptJSON
	a.json(&tr, "transcript", "s1")
	var lines []string
	for _, m := range tr.Messages {
		line := m.Role + ":" + m.Text
		for _, call := range m.ToolCalls {
			line += " call " + call.ID + " " + call.Name + " " + call.Arguments
		}
		if m.CallID != "" {
			line += " answers " + m.CallID + " " + m.Name
		}
		lines = append(lines, line)
	}
	wantLines := []string{"user:weather in Oslo?", `assistant: call call_1 weather {"city":"Oslo"}`,
		"tool:2C snow answers call_1 weather", "assistant:Done."}
	if !slices.Equal(lines, wantLines) || tr.Messages[3].Index != 3 || tr.Messages[0].Turn != s1.LastTurn {
		t.Errorf("transcript %q\nwant %q", lines, wantLines)
	}

	var turns turnsJSON
	a.json(&turns, "turns", "s1")
	if len(turns.Turns) != 1 {
		t.Fatalf("turns %+v", turns)
	}
	tj := turns.Turns[0]
	if tj.Turn != s1.LastTurn || tj.Status != "done" || tj.Usage.TotalTokens != 85 || tj.Iterations != 2 ||
		!strings.HasPrefix(tj.Committer, "node-a/") || tj.Committed.IsZero() || tj.Started == nil || tj.DurationMS <= 0 {
		t.Errorf("turn %+v", tj)
	}

	var fx effectsJSON
	a.json(&fx, "effects", "s1", tj.Turn)
	kinds := map[string]int{}
	for _, e := range fx.Effects {
		kinds[e.Kind]++
		// A checkpoint answered in the record before it has no hash.
		if !e.Executed || e.Replayed || e.Recorder != "node-a" || len(e.Hash) != 64 && (e.In == "" || e.Kind != "checkpoint") || e.Summary == "" || e.RecordedAt.IsZero() {
			t.Errorf("effect %+v", e)
		}
	}
	if !fx.Committed || kinds["llm-call"] != 2 || kinds["tool-call"]+kinds["tool-calls"] != 1 || kinds["checkpoint"] != 2 {
		t.Errorf("effects %+v", fx)
	}
	// A turn named by its input's sequence.
	var fx2 effectsJSON
	a.json(&fx2, "effects", "s1", strings.TrimPrefix(tj.Turn, "in-"))
	if !reflect.DeepEqual(fx, fx2) {
		t.Errorf("by sequence: %+v", fx2)
	}

	var ls leasesJSON
	a.json(&ls, "leases", "ls")
	if len(ls.Leases) != 1 {
		t.Fatalf("leases %+v", ls)
	}
	l := ls.Leases[0]
	if l.Kind != "sess" || l.ID != "s9" || l.Node != "holder" || l.Incarnation != "inc-1" || l.Host != "h1" || l.PID != 42 ||
		l.NodeLive || l.Token == 0 || l.Token != l.Revision || l.Expires.Sub(l.Renewed) != 15*time.Second {
		t.Errorf("lease %+v", l)
	}
	var ns nodesJSON
	a.json(&ns, "nodes", "ls", "--lease-ttl", "20s")
	if len(ns.Nodes) != 1 || ns.Nodes[0].Node != "node-a" || ns.Nodes[0].Incarnation != node.Owner().Incarnation ||
		ns.Nodes[0].Expires.Sub(ns.Nodes[0].Beat) != 20*time.Second {
		t.Errorf("nodes %+v", ns)
	}

	var st streamsJSON
	a.json(&st, "streams")
	var names []string
	for _, s := range st.Streams {
		names = append(names, s.Name)
	}
	schema := strconv.Itoa(streams.SchemaVersion)
	if st.SchemaVersion != schema || st.BuildSchemaVersion != schema || st.LeaseBucket != "LASH_LEASES" || st.Prefix != "lash" ||
		!slices.Equal(names, []string{"LASH_SESSIONS", "LASH_EFFECTS", "LASH_PROCESSES", "LASH_TRIGGERS", "LASH_TIMERS", "LASH_LIVE", "LASH_AGENTS", "KV_LASH_LEASES"}) ||
		st.Streams[0].Messages == 0 || st.Streams[0].LastSeq != lastSeq(t, c, streams.Sessions) || st.Streams[7].Bucket != "LASH_LEASES" {
		t.Errorf("streams %+v", st)
	}

	var q quarantineJSON
	a.json(&q, "quarantine", "ls")
	if len(q.Quarantine) != 2 {
		t.Fatalf("quarantine %+v", q)
	}
	p := q.Quarantine[0]
	if payload, _ := base64.StdEncoding.DecodeString(p.PayloadBase64); p.Stream != "LASH_SESSIONS" || p.Subject != "lash.sess.x.in" ||
		p.Fold != "sessions" || string(payload) != `{"nope":1}` || p.Preview != `{"nope":1}` || !strings.Contains(p.Reason, "nope") {
		t.Errorf("poison %+v", p)
	}
	if p := q.Quarantine[1]; p.Stream != "LASH_TRIGGERS" || p.Subject != "lash.signal.deploy.1" || p.Fold != "signals" ||
		p.Preview != "not json" || !strings.Contains(p.Reason, "JSON") {
		t.Errorf("poison %+v", p)
	}

	t.Run("pages", func(t *testing.T) {
		var all, first, second sessionsJSON
		a.json(&all, "sessions", "ls")
		if len(all.Sessions) < 2 || all.Next != "" {
			t.Fatalf("sessions ls: %d sessions, next %q; want two or more on one page", len(all.Sessions), all.Next)
		}
		a.json(&first, "sessions", "ls", "--limit", "1")
		if len(first.Sessions) != 1 || first.Next != first.Sessions[0].Session || !reflect.DeepEqual(first.Sessions[0], all.Sessions[0]) {
			t.Fatalf("first page %+v; want the first session and its id as next", first)
		}
		a.json(&second, "sessions", "ls", "--limit", "1", "--after", first.Next)
		if len(second.Sessions) != 1 || !reflect.DeepEqual(second.Sessions[0], all.Sessions[1]) {
			t.Fatalf("second page %+v; want %+v", second, all.Sessions[1])
		}
		contains(t, a.ok("sessions", "ls", "--limit", "1"), "more: --after "+strconv.Quote(first.Next))
		if r := a.run("sessions", "ls", "--limit", "0"); r.code != 2 && r.code != 1 || !strings.Contains(r.stderr, "--limit 0") {
			t.Fatalf("--limit 0: code %d, %s", r.code, r.stderr)
		}
	})

	t.Run("tables", func(t *testing.T) {
		contains(t, a.ok("sessions", "ls"), "SESSION", "s1", "s2", "natural-end", "50+35", "waiting")
		contains(t, a.ok("sessions", "show", "s2"), "revision", "waiting", "CALL", "call_1", "transfer", "approve the transfer?")
		contains(t, a.ok("transcript", "s1"), "ROLE", "call weather {\"city\":\"Oslo\"} [call_1]", "call_1 weather: 2C snow", "Done.")
		contains(t, a.ok("turns", "s1"), "DURATION", tj.Turn, "done", "50+35", "node-a/")
		contains(t, a.ok("effects", "s1", tj.Turn), "RECORDED AT", "llm-call", "executed", "node-a", fx.Effects[0].Hash[:8])
		contains(t, a.ok("leases", "ls"), "TOKEN", "s9", "holder/inc-1@h1", "no")
		contains(t, a.ok("nodes", "ls"), "INCARNATION", "node-a")
		contains(t, a.ok("streams"), "LASH_SESSIONS", "lash.sess.>", "bucket LASH_LEASES", "schema version "+schema)
		contains(t, a.ok("quarantine", "ls"), "LASH_SESSIONS", "lash.sess.x.in", `{"nope":1}`, "LASH_TRIGGERS", "not json")
	})

	t.Run("unknown session", func(t *testing.T) {
		for _, args := range [][]string{{"sessions", "show", "nope"}, {"transcript", "nope"}, {"turns", "nope"},
			{"effects", "nope", "in-1"}, {"verify", "nope"}} {
			a.fails(1, "unknown session nope", args...)
		}
		a.fails(1, "session s1 has no turn in-999", "effects", "s1", "999")
	})

	t.Run("usage", func(t *testing.T) {
		a.fails(2, "sessions show: want ID", "sessions", "show")
		a.fails(2, "unknown flag --bogus", "streams", "--bogus")
		a.fails(2, `unknown command "bogus"`, "bogus")
		a.fails(2, "sessions: give a subcommand", "sessions")
		for _, args := range [][]string{{"--help"}, {"help"}, {"help", "sessions", "show"}, {"decide", "-h"}} {
			if r := a.runIn(nil, args...); r.code != 0 || !strings.Contains(r.stdout, "Usage: lash-admin") {
				t.Errorf("%q: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
			}
		}
	})

	t.Run("send", func(t *testing.T) {
		var first, again appendJSON
		a.json(&first, "send", "s1", "hello there", "--key", "k1")
		a.json(&again, "send", "--key=k1", "s1", "hello there")
		if first.Seq == 0 || first.Duplicate || first.Session != "s1" || first.Key != "k1" || again.Seq != first.Seq || !again.Duplicate {
			t.Fatalf("send %+v then %+v", first, again)
		}
		checkInput(t, c, "s1", first.Seq, `{"text":"hello there"}`)
		// A first input starts a session; TEXT "-" is stdin.
		r := a.runIn(strings.NewReader("hi from stdin"), "--nats", a.url, "send", "s3", "-", "--json")
		var fresh appendJSON
		if err := json.Unmarshal([]byte(r.stdout), &fresh); r.code != 0 || err != nil {
			t.Fatalf("send from stdin: %+v %v", r, err)
		}
		checkInput(t, c, "s3", fresh.Seq, `{"text":"hi from stdin"}`)
		before := lastSeq(t, c, streams.Sessions)
		a.fails(2, "no text", "send", "s3", "")
		if r := a.runIn(strings.NewReader(""), "--nats", a.url, "send", "s3", "-"); r.code != 2 {
			t.Errorf("empty stdin: %+v", r)
		}
		a.fails(2, "the session id is empty", "send", "", "hi")
		if after := lastSeq(t, c, streams.Sessions); after != before {
			t.Fatal("a refused send appended")
		}
	})

	t.Run("decide", func(t *testing.T) {
		before := lastSeq(t, c, streams.Sessions)
		a.fails(1, `session s2 holds no suspended call call_9; its suspended calls are call_1`, "decide", "s2", "call_9", "resume")
		a.fails(1, "unknown session nope", "decide", "nope", "call_1", "resume")
		a.fails(1, "session s1 holds no call suspended", "decide", "s1", "call_1", "cancel")
		a.fails(2, "resume or cancel", "decide", "s2", "call_1", "approve")
		a.fails(2, "--mode and --payload go with resume", "decide", "s2", "call_1", "cancel", "--payload", "x")
		a.fails(2, "unknown mode", "decide", "s2", "call_1", "resume", "--mode", "later")
		if after := lastSeq(t, c, streams.Sessions); after != before {
			t.Fatalf("refused decisions moved the stream from %d to %d", before, after)
		}
		var d appendJSON
		a.json(&d, "decide", "s2", "call_1", "resume", "--payload", `{"ok":true}`, "--key", "d1")
		checkInput(t, c, "s2", d.Seq, `{"decisions":[{"id":"d1","call_id":"call_1","action":"resume","mode":"use-result","payload":"{\"ok\":true}"}]}`)
		contains(t, a.ok("decide", "s2", "call_1", "cancel", "--key", "d2"), "session s2: input", "appended (key d2)")
	})

	t.Run("cancel", func(t *testing.T) {
		var cj appendJSON
		a.json(&cj, "cancel", "s1", "--key", "c1")
		checkInput(t, c, "s1", cj.Seq, `{"cancel":true}`)
		before := lastSeq(t, c, streams.Sessions)
		a.fails(1, "unknown session nope", "cancel", "nope")
		if after := lastSeq(t, c, streams.Sessions); after != before {
			t.Fatal("a refused cancel appended")
		}
	})

	t.Run("signal", func(t *testing.T) {
		before := lastSeq(t, c, streams.Triggers)
		a.fails(2, "must be JSON", "signal", "github.push", "not json")
		a.fails(2, "wildcards", "signal", "github.*", "{}")
		if after := lastSeq(t, c, streams.Triggers); after != before {
			t.Fatal("a refused signal was published")
		}
		var s, again signalJSON
		a.json(&s, "signal", "github.push", `{"ref":"main"}`, "--key", "sig1")
		a.json(&again, "signal", "lash.signal.github.push", `{"ref":"main"}`, "--key", "sig1")
		if s.Subject != "lash.signal.github.push" || s.Seq == 0 || s.Duplicate || again.Seq != s.Seq || !again.Duplicate {
			t.Fatalf("signal %+v then %+v", s, again)
		}
		m, err := c.NextOnSubject(ctx, "lash.signal.github.push", 0)
		if err != nil || m.Seq != s.Seq || string(m.Data) != `{"ref":"main"}` || m.MsgID() != "sig1" {
			t.Fatalf("stored signal %+v %v", m, err)
		}
		r := a.runIn(strings.NewReader(`{"from":"stdin"}`), "--nats", a.url, "signal", "x", "-")
		if r.code != 0 || !strings.Contains(r.stdout, "signal published on lash.signal.x") {
			t.Fatalf("signal from stdin: %+v", r)
		}
	})

	t.Run("rebuild", func(t *testing.T) {
		before := a.ok("sessions", "ls", "--json")
		r := a.run("rebuild", "--json")
		if r.code != 0 || !strings.Contains(r.stderr, "sessions  [###") || !strings.Contains(r.stderr, "signals   [###") ||
			!strings.Contains(r.stderr, "processes [###") || strings.Count(r.stderr, "100%") != 3 {
			t.Fatalf("rebuild: %+v", r)
		}
		var rj rebuildJSON
		if err := json.Unmarshal([]byte(r.stdout), &rj); err != nil {
			t.Fatal(err)
		}
		if rj.Sessions != 3 || rj.Turns != 2 || rj.Quarantined != 2 || rj.Applied != lastSeq(t, c, streams.Sessions) ||
			rj.SignalsApplied != lastSeq(t, c, streams.Triggers) || rj.ProcessesApplied != lastSeq(t, c, streams.Processes) {
			t.Errorf("rebuild %+v\n%s", rj, r.stderr)
		}
		if after := a.ok("sessions", "ls", "--json"); after != before {
			t.Errorf("after rebuild:\n%s\nbefore:\n%s", after, before)
		}
		contains(t, a.ok("rebuild"), "rebuilt", "3 sessions, 2 turns, 2 quarantined")
	})

	t.Run("verify", func(t *testing.T) {
		var v verifyJSON
		a.json(&v, "verify", "s1")
		if !v.OK || len(v.Turns) != 1 || v.Turns[0].Verdict != "ok" || v.Turns[0].Replayed == 0 {
			t.Fatalf("verify with the recorded settings %+v", v)
		}
		a.json(&v, "verify", "s1", "--as-configured", "--model", "scripted", "--system", system)
		if !v.OK || len(v.Turns) != 1 || v.Turns[0].Verdict != "ok" || v.Turns[0].Replayed == 0 {
			t.Fatalf("verify %+v", v)
		}
		// lash-node's settings file, with settings lash-admin has no use for.
		conf := filepath.Join(t.TempDir(), "lash.conf")
		text := "nats = " + a.url + "\nscript = /nowhere/script.txt\ndata = /nowhere\nsystem = \"You are another agent.\"\n"
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		r := a.runIn(nil, "--cache", a.cache, "verify", "--as-configured", "s1", "--config", conf)
		if r.code != 1 || !strings.Contains(r.stdout, "DIVERGED") || !strings.Contains(r.stdout, "+ message 0 system: You are another agent.") ||
			!strings.Contains(r.stderr, "1 of 1 turns diverged") {
			t.Fatalf("verify with another prompt: %+v", r)
		}
		// The same from the environment, with the prompt the node ran.
		a.env = []string{"LASH_CONFIG=" + conf, "LASH_SYSTEM=" + system}
		defer func() { a.env = nil }()
		if r := a.runIn(nil, "--cache", a.cache, "verify", "--as-configured", "s1", tj.Turn); r.code != 0 || !strings.Contains(r.stdout, "OK") {
			t.Fatalf("verify from the environment: %+v", r)
		}
	})

	t.Run("cache", func(t *testing.T) {
		// A cache another process holds: the read goes through a temporary
		// copy, which is removed after.
		held, err := lash.OpenProjection(filepath.Join(a.cache, "projection"), c)
		if err != nil {
			t.Fatal(err)
		}
		tmp := t.TempDir()
		a.env = []string{"TMPDIR=" + tmp}
		out := a.ok("sessions", "ls", "--json")
		r := a.run("rebuild")
		a.env = nil
		held.Close()
		if !strings.Contains(out, `"s2"`) {
			t.Errorf("through a temporary copy: %s", out)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("temporary copies left: %v", left)
		}
		if r.code != 1 || !strings.Contains(r.stderr, "in use by another process") {
			t.Errorf("rebuild of a held cache: %+v", r)
		}
		// The default cache directory, one per deployment.
		home := t.TempDir()
		a.env = []string{"XDG_CACHE_HOME=" + home}
		if r := a.runIn(nil, "--nats", a.url, "sessions", "ls"); r.code != 0 {
			t.Fatalf("default cache: %+v", r)
		}
		a.env = nil
		if dirs, _ := filepath.Glob(filepath.Join(home, "lash-admin", "*", "projection")); len(dirs) != 1 {
			t.Errorf("default cache directories %v", dirs)
		}
		// On a server with no deployment lash-admin says so and creates
		// nothing.
		other := testenv.RunJetStream(t)
		b := &admin{t: t, bin: a.bin, url: other.URL(), cache: a.cache}
		if r := b.run("sessions", "ls"); r.code != 1 || !strings.Contains(r.stderr, "no lash deployment") {
			t.Fatalf("lash-admin with no deployment: %+v", r)
		}
		if _, err := streams.Bind(context.Background(), other.Conn(t), streams.Config{}); !errors.Is(err, streams.ErrNoDeployment) {
			t.Fatalf("lash-admin left a deployment behind: %v", err)
		}
		// The same cache on another deployment is folded again.
		if _, err := streams.Open(context.Background(), other.Conn(t), streams.Config{}); err != nil {
			t.Fatal(err)
		}
		var empty sessionsJSON
		b.json(&empty, "sessions", "ls")
		if len(empty.Sessions) != 0 {
			t.Errorf("another deployment's sessions: %+v", empty)
		}
		a.json(&sessions, "sessions", "ls")
		if len(sessions.Sessions) != 3 {
			t.Errorf("back on the first: %+v", sessions)
		}
	})
}

// checkInput reads an input back from the session's input subjects: a
// message from .in, a decision or a cancel from .decide.
func checkInput(t *testing.T, c *streams.Client, session string, seq uint64, want string) {
	t.Helper()
	in, err := sessionlog.New(c).InputAt(context.Background(), session, seq)
	if decides := !strings.Contains(want, `"text"`); err != nil || string(in.Data) != want || in.Decision != decides {
		t.Fatalf("input %d of %s: %+v %v, want %s (on the decision subject: %v)", seq, session, in, err, want, decides)
	}
}

// quarantine ls shows a long reason whole, in the last column, and clips
// only a long subject (the JSON form keeps it).
func TestQuarantineLongReason(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	field := "field_" + strings.Repeat("x", 240)
	session := "s" + strings.Repeat("y", 120)
	subject, _ := c.Subjects().SessionInputs(session)
	if _, _, err := c.Publish(ctx, streams.Publication{Subject: subject, Data: []byte(`{"` + field + `":1}`)}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args = append([]string{"--nats", srv.URL(), "--cache", filepath.Join(t.TempDir(), "cache"), "quarantine", "ls"}, args...)
		if code := Run(ctx, args, strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("%q: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	var q quarantineJSON
	if err := json.Unmarshal([]byte(run("--json")), &q); err != nil {
		t.Fatal(err)
	}
	if len(q.Quarantine) != 1 {
		t.Fatalf("quarantine %+v", q)
	}
	reason := q.Quarantine[0].Reason
	if len(reason) <= 200 || !strings.Contains(reason, field) || q.Quarantine[0].Subject != subject {
		t.Fatalf("poison %+v: want the whole subject and a reason over 200 characters naming the field", q.Quarantine[0])
	}

	lines := strings.Split(strings.TrimSuffix(run(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("table of %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	head, line := lines[0], lines[1]
	if !strings.HasSuffix(head, "REASON") || strings.Index(head, "PAYLOAD") > strings.Index(head, "REASON") {
		t.Errorf("REASON is not the last column: %q", head)
	}
	if !strings.HasSuffix(line, cell(reason)) {
		t.Errorf("the table does not end the row with the whole reason %q:\n%s", reason, line)
	}
	if clipped := subject[:subjectWidth-3] + "..."; !strings.Contains(line, clipped+" ") || strings.Contains(line, subject) {
		t.Errorf("the table does not clip the subject to %q:\n%s", clipped, line)
	}
	// The columns before the reason line up with the header's.
	if i := strings.Index(head, "PAYLOAD"); i < 0 || !strings.HasPrefix(line[i:], q.Quarantine[0].Preview) {
		t.Errorf("the payload is not under its header:\n%s\n%s", head, line)
	}
}
