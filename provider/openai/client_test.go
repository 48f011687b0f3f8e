package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/openai"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
)

const script = `
rule parallel
  when tools = 2
  when tool contains "error: no such city"
  say Checking two more.
  call get_weather {"city":"Lima"}
  call get_time {"zone":"America/Lima"}
  usage 321 42

rule late
  when tools = 4
  when tool is "error: sold out"
  say Booked the flight; the hotel is sold out.

rule long
  when user is long
  say "The quick brown fox jumps over the lazy dog,\nthen  rests. ünïcödé too."

rule calls-only
  when user is calls
  call a {"n":1}
  call b {"text":"hello world, this is longer"}

rule e429
  when user is e429
  fail 429 slow down
rule e500
  when user is e500
  fail 500
rule e503
  when user is e503
  fail 503 overloaded
rule e401
  when user is e401
  fail 401 invalid api key
rule e400
  when user is e400
  fail 400 bad request
rule e404
  when user is e404
  fail 404 no such model

rule stuck
  when user is hang
  hang

default
  say Hello there.
`

func newClient(t testing.TB, baseURL string, tweak ...func(*openai.Config)) *openai.Client {
	t.Helper()
	cfg := openai.Config{BaseURL: baseURL, APIKey: "test-key", Model: "test-model"}
	for _, f := range tweak {
		f(&cfg)
	}
	c, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func serve(t testing.TB) (*testenv.ModelServer, *openai.Client) {
	s := testenv.RunModelServer(t, scripted.MustParse(script))
	return s, newClient(t, s.URL())
}

func ask(text string) turn.ModelRequest {
	return turn.ModelRequest{Messages: []turn.Message{{Role: turn.RoleUser, Text: text}}}
}

func ptr[T any](v T) *T { return &v }

// weatherRequest has tools, an assistant message with two calls, and their
// results, one of them an error.
func weatherRequest() turn.ModelRequest {
	return turn.ModelRequest{
		Model: "weather-model",
		Messages: []turn.Message{
			{Role: turn.RoleSystem, Text: "You are a weather agent."},
			{Role: turn.RoleUser, Text: "Weather in Oslo and Atlantis?"},
			{Role: turn.RoleAssistant, Text: "Looking both up.", ToolCalls: []turn.ToolCall{
				{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`},
				{ID: "call_2", Name: "get_weather", Arguments: `{"city":"Atlantis"}`},
			}},
			{Role: turn.RoleTool, CallID: "call_1", Name: "get_weather", Text: "-3°C, snow"},
			{Role: turn.RoleTool, CallID: "call_2", Name: "get_weather", Text: "no such city", Error: true},
		},
		Tools: []turn.ToolSpec{
			{Name: "get_weather", Description: "Current weather in a city.",
				Schema: `{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}`},
			{Name: "get_time", Schema: `{"properties":{"zone":{"type":"string"}},"type":"object"}`},
		},
		Sampling: turn.Sampling{Temperature: ptr(0.25), TopP: ptr(0.5), MaxTokens: 256, Stop: []string{"END", "STOP"}},
	}
}

func TestToolCallsBothWays(t *testing.T) {
	s, c := serve(t)
	req := weatherRequest()
	resp, err := c.Complete(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := turn.ModelResponse{
		Text: "Checking two more.",
		ToolCalls: []turn.ToolCall{
			{ID: "call_3", Name: "get_weather", Arguments: `{"city":"Lima"}`},
			{ID: "call_4", Name: "get_time", Arguments: `{"zone":"America/Lima"}`},
		},
		Finish: turn.FinishToolCalls,
		Usage:  turn.Usage{InputTokens: 321, OutputTokens: 42},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("response\n got %+v\nwant %+v", resp, want)
	}

	// The server read back the request lash sent; only the error flag is
	// carried in the text on the wire.
	seen := s.Seen()
	if len(seen) != 1 {
		t.Fatalf("server saw %d requests", len(seen))
	}
	sent := weatherRequest()
	sent.Messages[4].Error, sent.Messages[4].Text = false, "error: no such city"
	if got := seen[0].Request; !reflect.DeepEqual(got, sent) {
		t.Fatalf("server read\n got %+v\nwant %+v", got, sent)
	}

	var body struct {
		Tools []struct {
			Type     string
			Function struct {
				Name       string
				Parameters map[string]any
			}
		}
		MaxTokens int `json:"max_tokens"`
		Messages  []struct {
			Role    string
			Content any
		}
	}
	if err := json.Unmarshal(seen[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Tools) != 2 || body.Tools[0].Type != "function" || body.Tools[0].Function.Parameters["type"] != "object" || body.MaxTokens != 256 {
		t.Fatalf("request body %s", seen[0].Body)
	}
	if m := body.Messages[2]; m.Role != "assistant" || m.Content != "Looking both up." {
		t.Fatalf("assistant message %+v", m)
	}
}

func TestMaxCompletionTokens(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(script))
	c := newClient(t, s.URL(), func(cfg *openai.Config) { cfg.MaxCompletionTokens = true })
	req := ask("hi")
	req.Sampling.MaxTokens = 99
	if _, err := c.Complete(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	body := string(s.Seen()[0].Body)
	if !strings.Contains(body, `"max_completion_tokens":99`) || strings.Contains(body, `"max_tokens"`) {
		t.Fatalf("body %s", body)
	}
}

func TestStreamingMatchesNonStreaming(t *testing.T) {
	s, c := serve(t)
	for _, req := range []turn.ModelRequest{ask("hi"), ask("long"), ask("calls"), weatherRequest()} {
		name := req.Messages[len(req.Messages)-1].Text
		t.Run(name, func(t *testing.T) {
			s.Reset()
			plain, err := c.Complete(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			var deltas []string
			streamed, err := c.Complete(context.Background(), req, func(text string) { deltas = append(deltas, text) })
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(streamed, plain) {
				t.Fatalf("streamed\n %+v\nplain\n %+v", streamed, plain)
			}
			if want := scripted.Chunks(plain.Text); !reflect.DeepEqual(deltas, want) {
				t.Fatalf("deltas %q, want %q in order", deltas, want)
			}
			if plain.Usage.InputTokens == 0 || (plain.Text != "" && plain.Usage.OutputTokens == 0) {
				t.Fatalf("no usage: %+v", plain.Usage)
			}
			seen := s.Seen()
			if len(seen) != 2 || seen[0].Stream || !seen[1].Stream || seen[0].Hash != seen[1].Hash || s.Count(seen[0].Hash) != 2 {
				t.Fatalf("server saw %+v", seen)
			}
			if !strings.Contains(string(seen[1].Body), `"include_usage":true`) {
				t.Fatalf("streamed request without include_usage: %s", seen[1].Body)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	_, c := serve(t)
	// Explicit usage from the script.
	resp, err := c.Complete(context.Background(), weatherRequest(), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if want := (turn.Usage{InputTokens: 321, OutputTokens: 42}); resp.Usage != want {
		t.Fatalf("streamed usage %+v, want %+v", resp.Usage, want)
	}
	// Derived usage: "hi" is one token in, "Hello there." three out.
	resp, err = c.Complete(context.Background(), ask("hi"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (turn.Usage{InputTokens: 1, OutputTokens: 3}); resp.Usage != want {
		t.Fatalf("usage %+v, want %+v", resp.Usage, want)
	}
}

func TestErrorClasses(t *testing.T) {
	_, c := serve(t)
	for _, tc := range []struct {
		ask       string
		status    int
		retryable bool
		message   string
	}{
		{"e429", 429, true, "slow down"},
		{"e500", 500, true, "Internal Server Error"},
		{"e503", 503, true, "overloaded"},
		{"e401", 401, false, "invalid api key"},
		{"e400", 400, false, "bad request"},
		{"e404", 404, false, "no such model"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.ask, stream), func(t *testing.T) {
				var onDelta func(string)
				if stream {
					onDelta = func(string) { t.Error("a failed call streamed text") }
				}
				_, err := c.Complete(context.Background(), ask(tc.ask), onDelta)
				var e *openai.Error
				if !errors.As(err, &e) {
					t.Fatalf("got %T %v, want *openai.Error", err, err)
				}
				if e.Status != tc.status || e.Retryable != tc.retryable || e.Message != tc.message {
					t.Fatalf("got %+v", e)
				}
				ce := openai.CallError(err)
				if ce.Retryable != tc.retryable || ce.Code != fmt.Sprintf("http_%d", tc.status) || !strings.Contains(ce.Message, tc.message) {
					t.Fatalf("CallError %+v", ce)
				}
			})
		}
	}
}

func TestTimeoutOnHangIsRetryable(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(script))
	c := newClient(t, s.URL(), func(cfg *openai.Config) { cfg.Timeout = 100 * time.Millisecond })
	for _, stream := range []bool{false, true} {
		var onDelta func(string)
		if stream {
			onDelta = func(string) {}
		}
		_, err := c.Complete(context.Background(), ask("hang"), onDelta)
		var e *openai.Error
		if !errors.As(err, &e) || !e.Retryable || e.Code != provider.CodeTimeout || !errors.Is(err, openai.ErrTimeout) {
			t.Fatalf("stream=%v: got %v, want a retryable timeout", stream, err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Fatalf("stream=%v: a per-request timeout looks like the caller's context: %v", stream, err)
		}
		if ce := openai.CallError(err); !ce.Retryable || ce.Code != "timeout" {
			t.Fatalf("CallError %+v", ce)
		}
	}
}

func TestConnectionRefusedIsRetryable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := newClient(t, "http://"+addr+"/v1")
	for _, stream := range []bool{false, true} {
		var onDelta func(string)
		if stream {
			onDelta = func(string) {}
		}
		_, err := c.Complete(context.Background(), ask("hi"), onDelta)
		var e *openai.Error
		if !errors.As(err, &e) || !e.Retryable || e.Code != provider.CodeConnection || e.Status != 0 {
			t.Fatalf("stream=%v: got %v, want a retryable connection error", stream, err)
		}
	}
}

func TestCancelHangingRequest(t *testing.T) {
	s, c := serve(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			s.Reset()
			var onDelta func(string)
			if stream {
				onDelta = func(string) {}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				_, err := c.Complete(ctx, ask("hang"), onDelta)
				errc <- err
			}()
			testenv.WaitFor(t, 5*time.Second, func() error {
				if s.Requests() == 0 {
					return errors.New("the request has not reached the server")
				}
				return nil
			})
			cancelled := time.Now()
			cancel()
			var err error
			select {
			case err = <-errc:
			case <-time.After(5 * time.Second):
				t.Fatal("Complete did not return after the caller cancelled")
			}
			if d := time.Since(cancelled); d > time.Second {
				t.Fatalf("Complete took %v to return after cancel", d)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			if ce := openai.CallError(err); ce.Retryable || ce.Code != provider.CodeCanceled {
				t.Fatalf("CallError %+v, want terminal canceled", ce)
			}
		})
	}
}

func TestCallerDeadlineIsTerminal(t *testing.T) {
	_, c := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Complete(ctx, ask("hang"), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	if ce := openai.CallError(err); ce.Retryable || ce.Code != provider.CodeDeadlineExceeded {
		t.Fatalf("CallError %+v, want terminal deadline_exceeded", ce)
	}
}

// A suspended call is answered first by a pending placeholder; its real
// result, under the same call id, goes out as a user message.
func TestLateResultMapping(t *testing.T) {
	s, c := serve(t)
	req := turn.ModelRequest{Messages: []turn.Message{
		{Role: turn.RoleUser, Text: "book a flight and a hotel"},
		{Role: turn.RoleAssistant, ToolCalls: []turn.ToolCall{
			{ID: "b1", Name: "book", Arguments: `{"to":"OSL"}`},
			{ID: "b2", Name: "book", Arguments: `{"to":"hotel"}`},
		}},
		{Role: turn.RoleTool, CallID: "b1", Name: "book", Text: "awaiting decision: waiting for the airline", Pending: true},
		{Role: turn.RoleTool, CallID: "b2", Name: "book", Text: "awaiting decision: waiting for the hotel", Pending: true},
		{Role: turn.RoleUser, Text: "any news?"},
		{Role: turn.RoleTool, CallID: "b1", Name: "book", Text: "booked, seat 12A"},
		{Role: turn.RoleTool, CallID: "b2", Name: "book", Text: "sold out", Error: true},
	}}
	resp, err := c.Complete(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The script counted four tool results and saw the last one's text:
	// the server undid the mapping.
	if resp.Text != "Booked the flight; the hotel is sold out." {
		t.Fatalf("text %q", resp.Text)
	}

	var body struct {
		Messages []struct {
			Role       string
			Content    *string
			ToolCallID string `json:"tool_call_id"`
		}
	}
	if err := json.Unmarshal(s.Seen()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	type msg struct{ role, id, content string }
	var got []msg
	for _, m := range body.Messages {
		var content string
		if m.Content != nil {
			content = *m.Content
		}
		got = append(got, msg{m.Role, m.ToolCallID, content})
	}
	want := []msg{
		{"user", "", "book a flight and a hotel"},
		{"assistant", "", ""},
		{"tool", "b1", "awaiting decision: waiting for the airline"},
		{"tool", "b2", "awaiting decision: waiting for the hotel"},
		{"user", "", "any news?"},
		{"user", "", "[late result for tool call b1 (book)]: booked, seat 12A"},
		{"user", "", "[late result for tool call b2 (book)]: error: sold out"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("messages on the wire\n got %q\nwant %q", got, want)
	}
}

// Errors a scripted server does not produce, from plain HTTP handlers: bodies
// that are not OpenAI's error shape, and an error event inside a stream.
func TestUnusualErrorBodies(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		body       string
		stream     bool
		code, msg  string
		retryable  bool
		wantStatus int
	}{
		{name: "plain text 502", status: 502, body: "<html>Bad Gateway</html>", code: "http_502", msg: "<html>Bad Gateway</html>", retryable: true, wantStatus: 502},
		{name: "vllm top level", status: 400, body: `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","code":400}`, code: "http_400", msg: "max_tokens is too large", wantStatus: 400},
		{name: "error string", status: 404, body: `{"error":"model 'x' not found"}`, code: "http_404", msg: "model 'x' not found", wantStatus: 404},
		{name: "openai with code", status: 429, body: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, code: "rate_limit_exceeded", msg: "Rate limit reached", retryable: true, wantStatus: 429},
		{name: "stream error event", status: 200, stream: true,
			body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"error\":{\"message\":\"overloaded\",\"code\":\"server_busy\"}}\n\n",
			code: "server_busy", msg: "overloaded", retryable: true},
		{name: "not json", status: 200, body: "hello", code: provider.CodeBadResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case tc.stream:
					w.Header().Set("Content-Type", "text/event-stream")
				case strings.HasPrefix(tc.body, "<"):
					w.Header().Set("Content-Type", "text/html")
				default:
					w.Header().Set("Content-Type", "application/json")
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			c := newClient(t, srv.URL+"/v1")
			var onDelta func(string)
			if tc.stream {
				onDelta = func(string) {}
			}
			_, err := c.Complete(context.Background(), ask("hi"), onDelta)
			var e *openai.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %T %v", err, err)
			}
			if e.Code != tc.code || e.Retryable != tc.retryable || e.Status != tc.wantStatus || (tc.msg != "" && e.Message != tc.msg) {
				t.Fatalf("got %+v (%v)", e, err)
			}
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(script))
	noModel := newClient(t, s.URL(), func(cfg *openai.Config) { cfg.Model = "" })
	_, err := noModel.Complete(context.Background(), ask("hi"), nil)
	if ce := openai.CallError(err); ce == nil || ce.Retryable || ce.Code != provider.CodeInvalidRequest {
		t.Fatalf("no model: %v", err)
	}
	c := newClient(t, s.URL())
	req := ask("hi")
	req.Tools = []turn.ToolSpec{{Name: "f", Schema: `["not", "an", "object"]`}}
	_, err = c.Complete(context.Background(), req, nil)
	if ce := openai.CallError(err); ce == nil || ce.Retryable || ce.Code != provider.CodeInvalidRequest {
		t.Fatalf("bad schema: %v", err)
	}
	if s.Requests() != 0 {
		t.Fatalf("invalid requests reached the server")
	}
	if _, err := openai.New(openai.Config{Timeout: -time.Second}); !errors.Is(err, openai.ErrInvalidConfig) {
		t.Fatalf("negative timeout: %v", err)
	}
}

// Cached prompt tokens and reasoning tokens are kept, as parts of the
// input and the output.
func TestUsageDetails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":60},"completion_tokens_details":{"reasoning_tokens":12}}}`))
	}))
	defer srv.Close()
	c, err := openai.New(openai.Config{BaseURL: srv.URL, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Complete(context.Background(), ask("hi"), nil)
	if want := (turn.Usage{InputTokens: 100, OutputTokens: 20, CacheReadTokens: 60, ReasoningTokens: 12}); err != nil || resp.Usage != want {
		t.Fatalf("usage %+v, %v; want %+v", resp.Usage, err, want)
	}
}
