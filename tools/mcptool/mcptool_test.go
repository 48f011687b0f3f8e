package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/mcptool"
	"github.com/lash-run/lash/turn"
)

// serverBinary builds examples/mcp-server, the SDK's own server.
func serverBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the example MCP server as a process")
	}
	bin := filepath.Join(t.TempDir(), "mcp-server")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/mcp-server").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func byName(t *testing.T, ts []tools.Tool) map[string]tools.Tool {
	t.Helper()
	m := map[string]tools.Tool{}
	for _, tool := range ts {
		m[tool.Spec().Name] = tool
	}
	return m
}

func call(t *testing.T, ctx context.Context, tool tools.Tool, key string, args string) tools.Result {
	t.Helper()
	ctx = tools.NewContext(ctx, tools.CallInfo{Key: turn.ReplayKey{Session: "s1", Turn: "in-1", Effect: 3, Call: key}, Attempt: 2, InDoubt: true})
	r, err := tool.Call(ctx, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s: %v", tool.Spec().Name, err)
	}
	return r
}

// Over stdio, a real child process: the tools are listed under the
// server's name, a call carries lash's idempotency key, attempt and
// in-doubt flag in _meta (so a retried append appends once), and a server
// that crashes mid-call, hangs or answers 10 MiB gives a failed call, never
// a stuck one; after the crash the next call starts the server again.
func TestStdio(t *testing.T) {
	bin := serverBinary(t)
	dir := t.TempDir()
	src, err := mcptool.New(mcptool.Server{Name: "ledger", Command: []string{bin, "--journal", filepath.Join(dir, "ledger.jsonl"), "--test-tools"}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ts, problems, err := src.Tools(ctx)
	if err != nil || len(problems) != 0 {
		t.Fatalf("Tools: %v %v", problems, err)
	}
	got := byName(t, ts)
	app := got["ledger__ledger_append"]
	if app == nil || got["ledger__echo_meta"] == nil || len(got) != 5 {
		t.Fatalf("tools %v", ts)
	}
	if s := app.Spec().Schema; !strings.Contains(s, `"entry"`) {
		t.Fatalf("schema %s", s)
	}
	if r := call(t, ctx, app, "c1", `{"entry":"one"}`); r.Status != turn.ToolOK || r.Output != "appended" {
		t.Fatalf("first append: %+v", r)
	}
	if r := call(t, ctx, app, "c1", `{"entry":"one"}`); r.Output != "already appended" {
		t.Fatalf("the same call again: %+v", r)
	}
	meta := call(t, ctx, got["ledger__echo_meta"], "c2", `{}`)
	var m map[string]any
	if err := json.Unmarshal([]byte(meta.Output), &m); err != nil || m[mcptool.MetaIdempotencyKey] != (turn.ReplayKey{Session: "s1", Turn: "in-1", Effect: 3, Call: "c2"}).String() ||
		m[mcptool.MetaAttempt] != 2.0 || m[mcptool.MetaInDoubt] != true {
		t.Fatalf("_meta the server got: %s", meta.Output)
	}
	if r := call(t, ctx, got["ledger__crash"], "c3", `{}`); r.Status != turn.ToolError || !strings.Contains(r.Output, "MCP server ledger") {
		t.Fatalf("a crash mid-call: %+v", r)
	}
	if r := call(t, ctx, app, "c4", `{"entry":"after the crash"}`); r.Output != "appended" {
		t.Fatalf("the call after a crash: %+v", r)
	}
	if r := call(t, ctx, got["ledger__huge"], "c5", `{}`); r.Status != turn.ToolError || !strings.Contains(r.Output, "over the bound") {
		t.Fatalf("a 10 MiB result: %.200v", r)
	}
	hctx, hcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer hcancel()
	if _, err := got["ledger__hang"].Call(hctx, json.RawMessage(`{}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a hung call: %v", err)
	}
	if r := call(t, ctx, app, "c6", `{"entry":"after the hang"}`); r.Output != "appended" {
		t.Fatalf("the call after a hang: %+v", r)
	}
	lines, err := os.ReadFile(filepath.Join(dir, "ledger.jsonl"))
	if err != nil || strings.Count(string(lines), "\n") != 3 {
		t.Fatalf("ledger: %s %v", lines, err)
	}
}

// Over streamable HTTP: the configured headers reach the server, and its
// tools are called.
func TestStreamableHTTP(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "greet", Description: "says hello"}, func(_ context.Context, req *mcp.CallToolRequest, a struct {
		Name string `json:"name"`
	}) (*mcp.CallToolResult, any, error) {
		key, _ := req.Params.GetMeta()[mcptool.MetaIdempotencyKey].(string)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + a.Name + " " + key}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	src, err := mcptool.New(mcptool.Server{Name: "web", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer t0k"}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	ts, _, err := src.Tools(ctx)
	if err != nil || len(ts) != 1 || ts[0].Spec().Name != "web__greet" {
		t.Fatalf("Tools: %v, %v", ts, err)
	}
	if r := call(t, ctx, ts[0], "c1", `{"name":"Ada"}`); r.Status != turn.ToolOK || !strings.HasPrefix(r.Output, "hello Ada s1/") {
		t.Fatalf("call: %+v", r)
	}
	for _, a := range auth {
		if a != "Bearer t0k" {
			t.Fatalf("a request without the header: %q", auth)
		}
	}
}

func TestServerChecks(t *testing.T) {
	for _, s := range []mcptool.Server{
		{Name: "", Command: []string{"x"}},
		{Name: "a__b", Command: []string{"x"}},
		{Name: "a.b", Command: []string{"x"}},
		{Name: "a"},
		{Name: "a", Command: []string{"x"}, URL: "http://h"},
		{Name: "a", URL: "ftp://h"},
	} {
		if _, err := mcptool.New(s, "test"); !errors.Is(err, mcptool.ErrInvalidServer) {
			t.Errorf("New(%+v) = %v; want ErrInvalidServer", s, err)
		}
	}
}

func TestParseServers(t *testing.T) {
	env := map[string]string{"TOKEN": "s3cret"}
	getenv := func(k string) string { return env[k] }
	ss, err := mcptool.ParseServers([]byte("- name: a\n  command: [srv, --x]\n- name: b\n  url: https://h/mcp\n  headers: {Authorization: env:TOKEN, X-Plain: v}\n  max_result_bytes: 10\n"), getenv)
	if err != nil || len(ss) != 2 || ss[0].Command[1] != "--x" || ss[1].Headers["Authorization"] != "s3cret" || ss[1].Headers["X-Plain"] != "v" || ss[1].MaxResultBytes != 10 {
		t.Fatalf("ParseServers = %+v, %v", ss, err)
	}
	for _, bad := range []struct{ file, want string }{
		{"- name: a\n  url: https://h\n  headers: {A: env:MISSING}\n", "MISSING is not set"},
		{"- name: a\n  comand: [x]\n", "field comand not found"},
		{"- name: a\n  command: [x]\n- name: a\n  command: [y]\n", "listed twice"},
		{"- name: a\n", "give a command or a url"},
	} {
		if _, err := mcptool.ParseServers([]byte(bad.file), getenv); !errors.Is(err, mcptool.ErrInvalidServer) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseServers(%q) = %v; want %q", bad.file, err, bad.want)
		}
	}
}

// A server that never answers is given up at the caller's deadline, for
// listing as for calls, and closing it does not wait on it for long.
func TestSilentServer(t *testing.T) {
	src, err := mcptool.New(mcptool.Server{Name: "mute", Command: []string{"sleep", "30"}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := src.Tools(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("listing a silent server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = src.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited on the silent server")
	}
}
