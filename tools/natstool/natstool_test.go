package natstool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

const (
	echoSchema  = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`
	emptySchema = `{"type":"object","additionalProperties":false}`
)

func echo(name string) natstool.Served {
	return natstool.Served{
		Name:        name,
		Description: "Echo " + name + ".",
		// Spaced out on purpose: discovery compacts it.
		Schema: json.RawMessage(strings.ReplaceAll(echoSchema, ",", ", ")),
		Handle: func(ctx context.Context, req natstool.Request) (string, error) {
			var a struct{ Text string }
			if err := json.Unmarshal(req.Args, &a); err != nil {
				return "", err
			}
			return name + ": " + a.Text, nil
		},
	}
}

func serve(t *testing.T, nc *nats.Conn, prefix, service string, served ...natstool.Served) micro.Service {
	t.Helper()
	svc, err := natstool.Serve(nc, prefix, micro.Config{Name: service, Version: "1.0.0"}, served...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return svc
}

func discover(t *testing.T, nc *nats.Conn, prefix string) map[string]tools.Tool {
	t.Helper()
	found, err := natstool.Discover(context.Background(), nc, prefix)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return byName(found)
}

func byName(ts []tools.Tool) map[string]tools.Tool {
	m := map[string]tools.Tool{}
	for _, t := range ts {
		m[t.Spec().Name] = t
	}
	return m
}

func callInfo(attempt int, inDoubt bool, decision *turn.Decision) tools.CallInfo {
	return tools.CallInfo{
		Key:      turn.ReplayKey{Session: "s1", Turn: "t1", Iteration: 2, Kind: turn.KindToolCall, Effect: 3, Call: "call_7"},
		Attempt:  attempt,
		InDoubt:  inDoubt,
		Decision: decision,
	}
}

func TestDiscoverTwoServices(t *testing.T) {
	s := testenv.RunJetStream(t)
	nc := s.Conn(t)
	serve(t, nc, "", "alpha", echo("one"), echo("two"))
	serve(t, s.Conn(t), "", "alpha", echo("one"), echo("two")) // a second instance collapses
	serve(t, nc, "", "beta", echo("three"))
	serve(t, nc, "other", "gamma", echo("elsewhere"))
	// A micro service that is not a tool server is passed over.
	plain, err := micro.AddService(nc, micro.Config{Name: "plain", Version: "0.1.0", Endpoint: &micro.EndpointConfig{
		Subject: "plain.work", Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(nil) }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Stop() })

	found, err := natstool.Discover(context.Background(), nc, "lash")
	if err != nil {
		t.Fatal(err)
	}
	var got []turn.ToolSpec
	for _, tool := range found {
		got = append(got, tool.Spec())
	}
	want := []turn.ToolSpec{
		{Name: "one", Description: "Echo one.", Schema: echoSchema},
		{Name: "three", Description: "Echo three.", Schema: echoSchema},
		{Name: "two", Description: "Echo two.", Schema: echoSchema},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("specs:\n got %+v\nwant %+v", got, want)
	}

	reg := tools.New()
	for _, tool := range found {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"one", "three"} {
		tool, _ := reg.Get(name)
		res, err := tool.Call(context.Background(), json.RawMessage(`{"text":"hi"}`))
		if err != nil || res.Status != turn.ToolOK || res.Output != name+": hi" {
			t.Errorf("%s: Call = %+v, %v", name, res, err)
		}
	}

	if other := discover(t, nc, "other"); len(other) != 1 || other["elsewhere"] == nil {
		t.Errorf("prefix other: found %v", other)
	}
}

func TestDiscoverNoServices(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	found, err := natstool.Discover(context.Background(), nc, "")
	if err != nil || len(found) != 0 {
		t.Fatalf("Discover = %v, %v; want nothing", found, err)
	}
	if _, err := natstool.Discover(context.Background(), nc, "a..b"); !errors.Is(err, natstool.ErrInvalidPrefix) {
		t.Errorf("prefix a..b: err = %v, want ErrInvalidPrefix", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := natstool.Discover(ctx, nc, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v, want context.Canceled", err)
	}
}

// A transport failure other than no responders is the call's error, not a
// result: a direct caller can tell it apart.
func TestClosedConnection(t *testing.T) {
	s := testenv.RunJetStream(t)
	serve(t, s.Conn(t), "", "svc", echo("echo"))
	nc := s.Conn(t)
	tool := discover(t, nc, "")["echo"]
	nc.Close()
	if _, err := tool.Call(context.Background(), json.RawMessage(`{"text":"x"}`)); !errors.Is(err, nats.ErrConnectionClosed) ||
		!strings.Contains(err.Error(), `tool "echo"`) {
		t.Errorf("Call err = %v, want ErrConnectionClosed naming the tool", err)
	}
}

func TestHeadersReachHandler(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	var mu sync.Mutex
	var got []natstool.Request
	serve(t, nc, "", "rec", natstool.Served{
		Name:   "rec",
		Schema: json.RawMessage(emptySchema),
		Handle: func(ctx context.Context, req natstool.Request) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, req)
			return "ok", nil
		},
	})
	tool := discover(t, nc, "")["rec"]
	ptr := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		info *tools.CallInfo
		want natstool.Request
	}{
		{"no call info", nil, natstool.Request{Args: json.RawMessage(`{}`)}},
		{"bare call info", &tools.CallInfo{}, natstool.Request{IdempotencyKey: tools.CallInfo{}.IdempotencyKey()}},
		{"in doubt", ptrTo(callInfo(3, true, nil)), natstool.Request{
			IdempotencyKey: "s1/t1/2/tool-call/3/call_7", Attempt: 3, InDoubt: true, CallID: "call_7",
		}},
		{"decision", ptrTo(callInfo(2, false, &turn.Decision{ID: "d", CallID: "call_7", Payload: `{"approve":true}`})), natstool.Request{
			IdempotencyKey: "s1/t1/2/tool-call/3/call_7", Attempt: 2, CallID: "call_7", Decision: ptr(`{"approve":true}`),
		}},
		{"decision with line breaks", ptrTo(callInfo(2, false, &turn.Decision{Payload: " yes,\n\tbut ünïcode\r\n"})), natstool.Request{
			IdempotencyKey: "s1/t1/2/tool-call/3/call_7", Attempt: 2, CallID: "call_7", Decision: ptr(" yes,\n\tbut ünïcode\r\n"),
		}},
		{"empty decision", ptrTo(callInfo(2, false, &turn.Decision{})), natstool.Request{
			IdempotencyKey: "s1/t1/2/tool-call/3/call_7", Attempt: 2, CallID: "call_7", Decision: ptr(""),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.info != nil {
				ctx = tools.NewContext(ctx, *tc.info)
			}
			res, err := tool.Call(ctx, json.RawMessage(` {} `))
			if err != nil || res.Output != "ok" {
				t.Fatalf("Call = %+v, %v", res, err)
			}
			mu.Lock()
			last := got[len(got)-1]
			mu.Unlock()
			if tc.want.Args == nil {
				tc.want.Args = json.RawMessage(`{}`)
			}
			if !reflect.DeepEqual(last, tc.want) {
				t.Errorf("handler got\n %s\nwant\n %s", describe(last), describe(tc.want))
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

func describe(r natstool.Request) string {
	d := "<nil>"
	if r.Decision != nil {
		d = fmt.Sprintf("%q", *r.Decision)
	}
	return fmt.Sprintf("args=%s key=%q attempt=%d in_doubt=%v call=%q decision=%s",
		r.Args, r.IdempotencyKey, r.Attempt, r.InDoubt, r.CallID, d)
}

// Outcomes as the Runner records them, from Serve's handlers and from a
// server written against the wire contract directly.
func TestOutcomes(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	handle := func(f func(natstool.Request) (string, error)) func(context.Context, natstool.Request) (string, error) {
		return func(_ context.Context, r natstool.Request) (string, error) { return f(r) }
	}
	serve(t, nc, "", "outcomes",
		echo("echo"),
		natstool.Served{Name: "approve", Schema: json.RawMessage(emptySchema), Handle: handle(func(r natstool.Request) (string, error) {
			if r.Decision == nil {
				return "", natstool.Pending("approve the transfer?\nsay yes or no")
			}
			return "decided " + *r.Decision, nil
		})},
		natstool.Served{Name: "fail", Schema: json.RawMessage(emptySchema), Handle: handle(func(natstool.Request) (string, error) {
			return "", errors.New("disk full\nline two")
		})},
		natstool.Served{Name: "panic", Schema: json.RawMessage(emptySchema), Handle: handle(func(natstool.Request) (string, error) {
			panic("oops")
		})},
	)
	raw, err := micro.AddService(nc, micro.Config{Name: "raw", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Stop() })
	rawEndpoint := func(name, code, desc string) {
		t.Helper()
		err := raw.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { _ = r.Error(code, desc, nil) }),
			micro.WithEndpointSubject("lash.tool."+name),
			micro.WithEndpointMetadata(map[string]string{natstool.MetaSchema: `{"type":"object"}`}))
		if err != nil {
			t.Fatal(err)
		}
	}
	rawEndpoint("raw_pending", "409", "waiting for a human")
	rawEndpoint("raw_error", "503", "backend down")

	reg := tools.New()
	for _, tool := range discover(t, nc, "") {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	call := func(id, name, args string, d *turn.Decision) turn.PendingCall {
		return turn.PendingCall{
			Call:     turn.ToolCall{ID: id, Name: name, Arguments: args},
			Key:      turn.ReplayKey{Session: "s", Turn: "t", Iteration: 1, Kind: turn.KindToolCall, Effect: 2, Call: id},
			Decision: d,
		}
	}
	batch := &turn.ToolCalls{Calls: []turn.PendingCall{
		call("c1", "echo", `{"text":"hi"}`, nil),
		call("c2", "echo", `{"txt":"hi"}`, nil),
		call("c3", "echo", `{"text":`, nil),
		call("c4", "approve", `{}`, nil),
		call("c5", "approve", `{}`, &turn.Decision{Payload: "yes"}),
		call("c6", "fail", ``, nil),
		call("c7", "panic", `{}`, nil),
		call("c8", "raw_pending", `{}`, nil),
		call("c9", "raw_error", `{}`, nil),
	}}
	results, err := tools.NewRunner(reg).RunBatch(context.Background(), batch, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	status := map[turn.ToolStatus]string{turn.ToolOK: "ok", turn.ToolError: "error", turn.ToolPending: "pending"}
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintf(&b, "%s %s %q\n", r.CallID, status[r.Status], r.Output)
	}
	want := `c1 ok "echo: hi"
c2 error "invalid arguments: validating root: unexpected additional properties [\"txt\"]"
c3 error "invalid arguments: malformed JSON: unexpected end of JSON input"
c4 pending "approve the transfer?\nsay yes or no"
c5 ok "decided yes"
c6 error "disk full\nline two"
c7 error "tool \"panic\" panicked: oops"
c8 pending "waiting for a human"
c9 error "backend down"
`
	if b.String() != want {
		t.Errorf("results:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestNoResponders(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	svc := serve(t, nc, "", "gone", echo("gone"))
	tool := discover(t, nc, "")["gone"]
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	// Stop drains; poll until the server has forgotten the subscription.
	testenv.WaitFor(t, 5*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := tool.Call(ctx, json.RawMessage(`{"text":"x"}`))
		if err != nil {
			return fmt.Errorf("Call returned error %v; want a result", err)
		}
		if res.Status != turn.ToolError || res.Output != `no server for tool "gone"` {
			return fmt.Errorf("Call = %+v", res)
		}
		return nil
	})
}

func TestCallHonoursDeadline(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	release := make(chan struct{})
	serve(t, nc, "", "slow", natstool.Served{Name: "slow", Schema: json.RawMessage(emptySchema),
		Handle: func(ctx context.Context, req natstool.Request) (string, error) {
			<-release
			return "late", nil
		}})
	t.Cleanup(func() { close(release) }) // runs before the service's Stop
	tool := discover(t, nc, "")["slow"]

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := tool.Call(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Call err = %v, want DeadlineExceeded", err)
	}

	reg := tools.New()
	if err := reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	res, err := tools.NewRunner(reg, tools.WithDefaultTimeout(50*time.Millisecond)).Invoke(context.Background(),
		turn.PendingCall{Call: turn.ToolCall{ID: "c", Name: "slow"}}, 1, false)
	if err != nil || res.Status != turn.ToolError || res.Output != `tool "slow" timed out after 50ms` {
		t.Errorf("Invoke = %+v, %v", res, err)
	}
}

func TestConflictingSchemas(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	serve(t, nc, "", "svc-a", echo("shared"), echo("mine"))
	other := echo("shared")
	other.Schema = json.RawMessage(emptySchema)
	serve(t, nc, "", "svc-b", other)

	found, err := natstool.Discover(context.Background(), nc, "")
	if !errors.Is(err, natstool.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	for _, want := range []string{`tool "shared"`, `"svc-a"`, `"svc-b"`, "differ in schema"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if got := byName(found); len(got) != 1 || got["mine"] == nil {
		t.Errorf("found %v; want only mine", got)
	}
}

func TestMalformedMetadata(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	serve(t, nc, "", "good", echo("fine"))
	bad, err := micro.AddService(nc, micro.Config{Name: "bad", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bad.Stop() })
	noop := micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(nil) })
	for _, ep := range []struct {
		name, subject string
		meta          map[string]string
	}{
		{"no_schema", "lash.tool.no_schema", map[string]string{natstool.MetaDescription: "d"}},
		{"not_json", "lash.tool.not_json", map[string]string{natstool.MetaSchema: `{"type":`}},
		{"array", "lash.tool.array", map[string]string{natstool.MetaSchema: `[1]`}},
		{"string_type", "lash.tool.string_type", map[string]string{natstool.MetaSchema: `{"type":"string"}`}},
		{"dotted", "lash.tool.a.b", map[string]string{natstool.MetaSchema: emptySchema}},
		{"wildcard", "lash.tool.*", map[string]string{natstool.MetaSchema: emptySchema}},
	} {
		if err := bad.AddEndpoint(ep.name, noop, micro.WithEndpointSubject(ep.subject), micro.WithEndpointMetadata(ep.meta)); err != nil {
			t.Fatal(err)
		}
	}

	found, err := natstool.Discover(context.Background(), nc, "")
	if got := byName(found); len(got) != 1 || got["fine"] == nil {
		t.Errorf("found %v; want only fine", got)
	}
	if !errors.Is(err, natstool.ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 6 {
		t.Errorf("want one error per bad endpoint, got:\n%s", err)
	}
	for _, want := range []string{
		`endpoint "no_schema" on lash.tool.no_schema: no lash.schema metadata`,
		`endpoint "not_json" on lash.tool.not_json: schema is not JSON`,
		`endpoint "array" on lash.tool.array: tools: invalid tool spec: tool "array": schema is not a JSON object`,
		`endpoint "string_type" on lash.tool.string_type: schema's type is "string"`,
		`endpoint "dotted" on lash.tool.a.b: tools: invalid tool name: "a.b" has '.'`,
		`endpoint "wildcard" on lash.tool.*: tools: invalid tool name: "*"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
	if !strings.Contains(lines[0], `service "bad" (version 1.0.0, id `) {
		t.Errorf("error does not name the service: %s", lines[0])
	}
}

func TestServeRefusesBadTools(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	ok := func(context.Context, natstool.Request) (string, error) { return "", nil }
	cfg := micro.Config{Name: "refused", Version: "1.0.0"}
	for _, tc := range []struct {
		name   string
		served []natstool.Served
		want   error
	}{
		{"bad name", []natstool.Served{{Name: "a b", Schema: json.RawMessage(emptySchema), Handle: ok}}, tools.ErrInvalidName},
		{"bad schema", []natstool.Served{{Name: "x", Schema: json.RawMessage(`[]`), Handle: ok}}, tools.ErrInvalidSpec},
		{"duplicate", []natstool.Served{{Name: "x", Schema: json.RawMessage(emptySchema), Handle: ok}, {Name: "x", Schema: json.RawMessage(emptySchema), Handle: ok}}, tools.ErrDuplicate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := natstool.Serve(nc, "", cfg, tc.served...); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := natstool.Serve(nc, "", cfg, natstool.Served{Name: "x", Schema: json.RawMessage(`{"type":"array"}`), Handle: ok}); err == nil {
		t.Error("a non-object schema was served")
	}
	if _, err := natstool.Serve(nc, "", cfg, natstool.Served{Name: "x", Schema: json.RawMessage(emptySchema)}); err == nil {
		t.Error("a nil handler was served")
	}
	// Nothing refused was left serving.
	if found, err := natstool.Discover(context.Background(), nc, ""); len(found) != 0 || err != nil {
		t.Errorf("Discover = %v, %v", found, err)
	}
}

// A call made while its tool's server restarts waits for it to come back.
func TestCallWaitsForServer(t *testing.T) {
	nc := testenv.RunJetStream(t).Conn(t)
	svc := serve(t, nc, "", "restarting", echo("back"))
	tool := discover(t, nc, "")["back"]
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, func() error {
		_, err := nc.Request(natstool.Subject("", "back"), nil, time.Second)
		if !errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("the stopped server still answers: %v", err)
		}
		return nil
	})
	type outcome struct {
		res tools.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := tool.Call(ctx, json.RawMessage(`{"text":"x"}`))
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		t.Fatalf("the call ended with no server to answer it: %+v", o)
	case <-time.After(300 * time.Millisecond): // the call is waiting
	}
	serve(t, nc, "", "restarting", echo("back"))
	o := <-done
	if o.err != nil || o.res.Status != turn.ToolOK {
		t.Fatalf("call once the server is back: %+v", o)
	}
}
