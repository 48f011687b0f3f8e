package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

// wait bounds every blocking step of a test, so a bug fails the test instead
// of hanging it. It is far above any deadline the tests expect to meet.
const wait = 10 * time.Second

func pendingCall(id, name, args string) turn.PendingCall {
	return turn.PendingCall{
		Call: turn.ToolCall{ID: id, Name: name, Arguments: args},
		Key:  turn.ReplayKey{Session: "s1", Turn: "t1", Iteration: 2, Kind: turn.KindToolCall, Effect: 3, Call: id},
	}
}

func mustFunc[A any](t *testing.T, name string, fn func(context.Context, A) (string, error), opts ...tools.Option) tools.Tool {
	t.Helper()
	tool, err := tools.Func(name, "", fn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func newRunner(t *testing.T, ts []tools.Tool, opts ...tools.RunnerOption) *tools.Runner {
	t.Helper()
	reg := tools.New()
	for _, tool := range ts {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	return tools.NewRunner(reg, opts...)
}

type invoked struct {
	res turn.ToolResult
	err error
	dur time.Duration
}

// invoke runs r.Invoke in a goroutine and fails the test if it does not
// return within wait.
func invoke(t *testing.T, ctx context.Context, r *tools.Runner, call turn.PendingCall, attempt int, inDoubt bool) invoked {
	t.Helper()
	ch := make(chan invoked, 1)
	start := time.Now()
	go func() {
		res, err := r.Invoke(ctx, call, attempt, inDoubt)
		ch <- invoked{res, err, time.Since(start)}
	}()
	select {
	case got := <-ch:
		return got
	case <-time.After(wait):
		t.Fatalf("Invoke(%s) did not return within %s", call.Call.Name, wait)
		return invoked{}
	}
}

type none struct{}

func TestInvokeResults(t *testing.T) {
	type Args struct {
		Mode string `json:"mode"`
	}
	x := mustFunc(t, "x", func(ctx context.Context, a Args) (string, error) {
		switch a.Mode {
		case "fail":
			return "", errors.New("no such customer")
		case "pending":
			return "", tools.Pending("needs approval")
		case "panic":
			panic("kaboom")
		}
		return "done", nil
	})
	r := newRunner(t, []tools.Tool{x, rawTool{name: "raw"}})
	for _, tc := range []struct {
		call turn.PendingCall
		want turn.ToolResult
	}{
		{pendingCall("c1", "x", `{"mode":"ok"}`), turn.ToolResult{CallID: "c1", Status: turn.ToolOK, Output: "done"}},
		{pendingCall("c2", "x", `{"mode":"fail"}`), turn.ToolResult{CallID: "c2", Status: turn.ToolError, Output: "no such customer"}},
		{pendingCall("c3", "x", `{"mode":"pending"}`), turn.ToolResult{CallID: "c3", Status: turn.ToolPending, Output: "needs approval"}},
		{pendingCall("c4", "x", `{"mode":"panic"}`), turn.ToolResult{CallID: "c4", Status: turn.ToolError, Output: `tool "x" panicked: kaboom`}},
		{pendingCall("c5", "x", `{"mode":1}`), turn.ToolResult{CallID: "c5", Status: turn.ToolError, Output: `invalid arguments: field "mode": got integer, want string`}},
		{pendingCall("c6", "nope", `{}`), turn.ToolResult{CallID: "c6", Status: turn.ToolError, Output: `unknown tool "nope"`}},
		{pendingCall("c7", "raw", `panic`), turn.ToolResult{CallID: "c7", Status: turn.ToolError, Output: `tool "raw" panicked: raw kaboom`}},
		{pendingCall("c8", "raw", `status`), turn.ToolResult{CallID: "c8", Status: turn.ToolError, Output: `tool "raw" returned an invalid status 9`}},
		{pendingCall("c9", "raw", `pending`), turn.ToolResult{CallID: "c9", Status: turn.ToolPending, Output: "waiting for a human"}},
		{pendingCall("c10", "raw", `ok`), turn.ToolResult{CallID: "c10", Status: turn.ToolOK, Output: "raw ok"}},
	} {
		got := invoke(t, context.Background(), r, tc.call, 1, false)
		if got.err != nil || got.res != tc.want {
			t.Errorf("%s %s: got %+v, %v\nwant %+v", tc.call.Call.Name, tc.call.Call.Arguments, got.res, got.err, tc.want)
		}
	}
}

// rawTool implements Tool directly; its arguments are a bare word.
type rawTool struct{ name string }

func (t rawTool) Spec() turn.ToolSpec { return turn.ToolSpec{Name: t.name} }

func (t rawTool) Call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	switch string(args) {
	case "panic":
		panic("raw kaboom")
	case "status":
		return tools.Result{Status: 9, Output: "?"}, nil
	case "pending":
		return tools.Result{Status: turn.ToolPending, Output: "waiting for a human"}, nil
	}
	return tools.Result{Output: "raw ok"}, nil
}

func TestPanicIsLogged(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	boom := mustFunc(t, "boom", func(ctx context.Context, _ none) (string, error) { panic("kaboom") })
	r := newRunner(t, []tools.Tool{boom}, tools.WithLogger(log))
	got := invoke(t, context.Background(), r, pendingCall("c1", "boom", `{}`), 1, false)
	if got.res.Status != turn.ToolError || strings.Contains(got.res.Output, "goroutine") {
		t.Errorf("result %+v: want a failure without the stack", got.res)
	}
	mu.Lock()
	defer mu.Unlock()
	if logged := buf.String(); !strings.Contains(logged, "tool panicked") || !strings.Contains(logged, "runtime/debug.Stack") {
		t.Errorf("log lacks the panic and its stack:\n%s", logged)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestCallInfo(t *testing.T) {
	infos := make(chan tools.CallInfo, 1)
	tool := mustFunc(t, "approve", func(ctx context.Context, _ none) (string, error) {
		info, ok := tools.Info(ctx)
		if !ok {
			return "", errors.New("no call info")
		}
		infos <- info
		if info.Decision == nil {
			return "", tools.Pending("approve the transfer?")
		}
		p := info.Decision.Payload
		info.Decision.Payload = "tampered" // a copy: the batch is not changed
		return "approved: " + p, nil
	})
	r := newRunner(t, []tools.Tool{tool})

	call := pendingCall("c1", "approve", `{}`)
	got := invoke(t, context.Background(), r, call, 1, false)
	if want := (turn.ToolResult{CallID: "c1", Status: turn.ToolPending, Output: "approve the transfer?"}); got.err != nil || got.res != want {
		t.Fatalf("first run: %+v, %v", got.res, got.err)
	}
	info := <-infos
	if info.Key != call.Key || info.Attempt != 1 || info.InDoubt || info.Decision != nil {
		t.Errorf("first run: info %+v", info)
	}
	if want := "s1/t1/2/tool-call/3/c1"; info.IdempotencyKey() != want {
		t.Errorf("IdempotencyKey = %q, want %q", info.IdempotencyKey(), want)
	}

	call.Decision = &turn.Decision{ID: "d1", CallID: "c1", Action: turn.Resume, Mode: turn.ResumePassToTool, Payload: "yes"}
	got = invoke(t, context.Background(), r, call, 3, true)
	if want := (turn.ToolResult{CallID: "c1", Status: turn.ToolOK, Output: "approved: yes"}); got.err != nil || got.res != want {
		t.Fatalf("resumed run: %+v, %v", got.res, got.err)
	}
	info = <-infos
	if info.Key != call.Key || info.Attempt != 3 || !info.InDoubt || info.Decision == nil || info.Decision.ID != "d1" {
		t.Errorf("resumed run: info %+v", info)
	}
	if call.Decision.Payload != "yes" {
		t.Errorf("the tool changed the batch's decision: %+v", call.Decision)
	}

	if _, ok := tools.Info(context.Background()); ok {
		t.Error("Info found call info in a bare context")
	}
}

func TestTimeoutToolHonoursContext(t *testing.T) {
	tool := mustFunc(t, "slow", func(ctx context.Context, _ none) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}, tools.WithTimeout(50*time.Millisecond))
	r := newRunner(t, []tools.Tool{tool})
	got := invoke(t, context.Background(), r, pendingCall("c1", "slow", `{}`), 1, false)
	want := turn.ToolResult{CallID: "c1", Status: turn.ToolError, Output: `tool "slow" timed out after 50ms`}
	if got.err != nil || got.res != want {
		t.Fatalf("got %+v, %v; want %+v", got.res, got.err, want)
	}
	if got.dur < 50*time.Millisecond || got.dur > 5*time.Second {
		t.Errorf("returned after %s; want soon after the 50ms deadline", got.dur)
	}
}

func TestTimeoutToolIgnoresContext(t *testing.T) {
	release := make(chan struct{})
	returned := make(chan struct{})
	tool := mustFunc(t, "stuck", func(ctx context.Context, _ none) (string, error) {
		defer close(returned)
		<-release // ignores ctx
		return "too late", nil
	})
	r := newRunner(t, []tools.Tool{tool}, tools.WithDefaultTimeout(50*time.Millisecond))
	var results []turn.ToolResult
	var err error
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		batch := &turn.ToolCalls{Calls: []turn.PendingCall{pendingCall("c1", "stuck", `{}`)}}
		results, err = r.RunBatch(context.Background(), batch, nil, nil)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		close(release)
		t.Fatalf("RunBatch did not return within %s although the call's deadline was 50ms", wait)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %s; want soon after the 50ms deadline", d)
	}
	want := []turn.ToolResult{{CallID: "c1", Status: turn.ToolError, Output: `tool "stuck" timed out after 50ms`}}
	if err != nil || len(results) != 1 || results[0] != want[0] {
		t.Fatalf("got %+v, %v; want %+v", results, err, want)
	}
	if n := r.Stragglers(); n != 1 {
		t.Errorf("Stragglers = %d while the tool runs on, want 1", n)
	}

	// The abandoned goroutine ends when the tool returns, and nothing it
	// returns changes the answer already given.
	close(release)
	select {
	case <-returned:
	case <-time.After(wait):
		t.Fatal("the tool did not return after release")
	}
	deadline := time.Now().Add(wait)
	for r.Stragglers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Stragglers = %d after the tool returned", r.Stragglers())
		}
		runtime.Gosched()
	}
	if results[0] != want[0] {
		t.Errorf("result changed after the deadline: %+v", results[0])
	}
}

func TestTimeoutDefaultAndOverride(t *testing.T) {
	deadlineIn := func(ctx context.Context, _ none) (string, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return "", errors.New("no deadline")
		}
		return time.Until(dl).Round(time.Hour).String(), nil
	}
	r := newRunner(t, []tools.Tool{
		mustFunc(t, "default", deadlineIn),
		mustFunc(t, "own", deadlineIn, tools.WithTimeout(5*time.Hour)),
	}, tools.WithDefaultTimeout(2*time.Hour))
	for name, want := range map[string]string{"default": "2h0m0s", "own": "5h0m0s"} {
		got := invoke(t, context.Background(), r, pendingCall("c1", name, `{}`), 1, false)
		if got.err != nil || got.res.Output != want {
			t.Errorf("%s: deadline in %+v, %v; want %s", name, got.res, got.err, want)
		}
	}
}

func TestInterrupted(t *testing.T) {
	started := make(chan struct{})
	tool := mustFunc(t, "wait", func(ctx context.Context, _ none) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	})
	r := newRunner(t, []tools.Tool{tool})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	got := invoke(t, ctx, r, pendingCall("c1", "wait", `{}`), 1, false)
	if !errors.Is(got.err, tools.ErrInterrupted) || !errors.Is(got.err, context.Canceled) {
		t.Fatalf("got %+v, %v; want ErrInterrupted wrapping context.Canceled", got.res, got.err)
	}
	// Nothing runs under a context that has already ended.
	got = invoke(t, ctx, r, pendingCall("c2", "nope", `{}`), 1, false)
	if !errors.Is(got.err, tools.ErrInterrupted) {
		t.Fatalf("ended context: got %+v, %v", got.res, got.err)
	}
}

func TestRunBatchParallelInOrder(t *testing.T) {
	const n = 8
	var arrived atomic.Int32
	allIn := make(chan struct{})
	// Call i returns only after call i+1 has, so the calls finish in the
	// reverse of the batch's order.
	finished := make([]chan struct{}, n+1)
	for i := range finished {
		finished[i] = make(chan struct{})
	}
	close(finished[n])
	type Args struct {
		I int `json:"i"`
	}
	tool := mustFunc(t, "step", func(ctx context.Context, a Args) (string, error) {
		if arrived.Add(1) == n {
			close(allIn)
		}
		// The barrier: no call gets past it unless all n are running at once.
		select {
		case <-allIn:
		case <-ctx.Done():
			return "", fmt.Errorf("only %d of %d calls were running at once", arrived.Load(), n)
		}
		<-finished[a.I+1]
		defer close(finished[a.I])
		return "step " + strconv.Itoa(a.I), nil
	}, tools.WithTimeout(wait))
	r := newRunner(t, []tools.Tool{tool})

	batch := &turn.ToolCalls{H: turn.Head{ID: 7}}
	for i := range n {
		id := "c" + strconv.Itoa(i)
		batch.Calls = append(batch.Calls, pendingCall(id, "step", `{"i":`+strconv.Itoa(i)+`}`))
	}
	var seen []string
	attempts := func(c turn.PendingCall) (int, bool) { return 2, c.Call.ID == "c0" }
	results, err := r.RunBatch(context.Background(), batch, attempts, func(res turn.ToolResult) {
		seen = append(seen, res.CallID)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != n {
		t.Fatalf("%d results, want %d: %+v", len(results), n, results)
	}
	for i, res := range results {
		want := turn.ToolResult{CallID: "c" + strconv.Itoa(i), Status: turn.ToolOK, Output: "step " + strconv.Itoa(i)}
		if res != want {
			t.Errorf("results[%d] = %+v, want %+v", i, res, want)
		}
	}
	if len(seen) != n {
		t.Errorf("onResult saw %d results, want %d", len(seen), n)
	}
}

func TestRunBatchInterrupted(t *testing.T) {
	started := make(chan struct{})
	r := newRunner(t, []tools.Tool{
		mustFunc(t, "quick", func(ctx context.Context, _ none) (string, error) {
			return "quick", nil
		}),
		mustFunc(t, "wait", func(ctx context.Context, _ none) (string, error) {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		}),
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	batch := &turn.ToolCalls{Calls: []turn.PendingCall{
		pendingCall("c1", "wait", `{}`),
		pendingCall("c2", "quick", `{}`),
	}}
	results, err := r.RunBatch(ctx, batch, nil, func(res turn.ToolResult) {
		if res.CallID == "c2" {
			<-started
			cancel()
		}
	})
	if !errors.Is(err, tools.ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	want := turn.ToolResult{CallID: "c2", Status: turn.ToolOK, Output: "quick"}
	if len(results) != 1 || results[0] != want {
		t.Fatalf("results = %+v, want only %+v", results, want)
	}
}

func TestRunBatchEmpty(t *testing.T) {
	r := newRunner(t, nil)
	results, err := r.RunBatch(context.Background(), &turn.ToolCalls{}, nil, nil)
	if err != nil || len(results) != 0 {
		t.Fatalf("got %+v, %v", results, err)
	}
}

// While the registry settles, a call to a tool it does not hold yet waits
// for the tool and runs it; once it settled, such a call fails at once as
// unknown; a call waiting when its context ends has no outcome.
func TestUnknownToolWhileSettling(t *testing.T) {
	reg := tools.New()
	r := tools.NewRunner(reg)
	reg.Settling(time.Now().Add(time.Hour))
	done := make(chan invoked, 1)
	go func() { done <- invoke(t, context.Background(), r, pendingCall("c1", "late", `{}`), 2, true) }()
	late := mustFunc(t, "late", func(ctx context.Context, _ none) (string, error) { return "came back", nil })
	if err := reg.Register(late); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got.err != nil || got.res.Status != turn.ToolOK || got.res.Output != "came back" {
		t.Fatalf("a call to a tool found while settling: %+v, %v", got.res, got.err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- invoke(t, ctx, r, pendingCall("c2", "gone", `{}`), 2, true) }()
	cancel()
	if got := <-done; !errors.Is(got.err, tools.ErrInterrupted) {
		t.Fatalf("a call waiting for a tool when its context ended: %+v, %v; want ErrInterrupted", got.res, got.err)
	}

	go func() { done <- invoke(t, context.Background(), r, pendingCall("c3", "gone", `{}`), 2, true) }()
	reg.Settling(time.Time{}) // settled without it
	if got := <-done; got.err != nil || got.res.Status != turn.ToolError || !strings.Contains(got.res.Output, `unknown tool "gone"`) {
		t.Fatalf("a call to a tool the registry settled without: %+v, %v", got.res, got.err)
	}
	// A window that has run out is settled too.
	reg.Settling(time.Now().Add(-time.Second))
	if got := invoke(t, context.Background(), r, pendingCall("c4", "gone", `{}`), 1, false); got.res.Status != turn.ToolError {
		t.Fatalf("a call after the window: %+v, %v", got.res, got.err)
	}
}
