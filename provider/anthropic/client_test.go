package anthropic_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/anthropic"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
)

const script = `
rule lookup
  when user contains weather
  when tools = 0
  call get_weather {"city":"Oslo"}

rule answer
  when tool contains rain
  say It rains in Oslo: take an umbrella, and do not forget your boots today.

rule failed
  when tool contains error:
  say The lookup failed.

default
  say Hello from the scripted model.
`

func client(t *testing.T, url string, mod func(*anthropic.Config)) *anthropic.Client {
	t.Helper()
	cfg := anthropic.Config{BaseURL: url, APIKey: "sk-ant-secret-key-123", Model: "claude-test"}
	if mod != nil {
		mod(&cfg)
	}
	c, err := anthropic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var weatherTool = turn.ToolSpec{Name: "get_weather", Description: "the weather in a city",
	Schema: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`}

// A tool round over real HTTP, whole and streamed: the system prompt, the
// tools and the tool result reach the server as lash wrote them, the tool
// call and the answer come back, and a streamed answer is the whole one,
// told piece by piece.
func TestToolRound(t *testing.T) {
	srv := testenv.RunModelServer(t, scripted.MustParse(script))
	c := client(t, srv.AnthropicURL(), nil)
	ctx := context.Background()
	req := turn.ModelRequest{Messages: []turn.Message{
		{Role: turn.RoleSystem, Text: "You are a weather bot."},
		{Role: turn.RoleUser, Text: "What is the weather?"},
	}, Tools: []turn.ToolSpec{weatherTool}}
	resp, err := c.Complete(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "get_weather" || resp.ToolCalls[0].Arguments != `{"city":"Oslo"}` || resp.Finish != turn.FinishToolCalls {
		t.Fatalf("the tool call: %+v", resp)
	}
	seen := srv.Seen()[0].Request
	if seen.Model != "claude-test" || seen.Messages[0].Role != turn.RoleSystem || seen.Messages[0].Text != "You are a weather bot." ||
		len(seen.Tools) != 1 || !strings.Contains(seen.Tools[0].Schema, `"additionalProperties":false`) || !strings.Contains(seen.Tools[0].Schema, `"required":["city"]`) {
		t.Fatalf("the server saw %+v", seen)
	}
	req.Messages = append(req.Messages,
		turn.Message{Role: turn.RoleAssistant, ToolCalls: resp.ToolCalls},
		turn.Message{Role: turn.RoleTool, CallID: resp.ToolCalls[0].ID, Name: "get_weather", Text: "rain, 8C"})
	whole, err := c.Complete(ctx, req, nil)
	if err != nil || !strings.HasPrefix(whole.Text, "It rains in Oslo") || whole.Finish != turn.FinishStop || whole.Usage.OutputTokens == 0 {
		t.Fatalf("the answer: %+v, %v", whole, err)
	}
	if got := srv.Seen()[1].Request.Messages[3]; got.Role != turn.RoleTool || got.Name != "get_weather" || got.Text != "rain, 8C" {
		t.Fatalf("the tool result as the server saw it: %+v", got)
	}
	var pieces []string
	streamed, err := c.Complete(ctx, req, func(s string) { pieces = append(pieces, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) < 2 || strings.Join(pieces, "") != whole.Text || streamed.Text != whole.Text || streamed.Finish != whole.Finish || streamed.Usage != whole.Usage {
		t.Fatalf("streamed %q into %+v; want %+v", pieces, streamed, whole)
	}
	// A failed tool result is marked so, and a streamed tool call is put
	// back together.
	req.Messages[3].Error, req.Messages[3].Text = true, "no such city"
	if r, err := c.Complete(ctx, req, nil); err != nil || r.Text != "The lookup failed." {
		t.Fatalf("after a failed tool: %+v, %v", r, err)
	}
	calls, err := c.Complete(ctx, turn.ModelRequest{Messages: req.Messages[:2], Tools: req.Tools}, func(string) {})
	if err != nil || len(calls.ToolCalls) != 1 || calls.ToolCalls[0].Arguments != `{"city":"Oslo"}` {
		t.Fatalf("a streamed tool call: %+v, %v", calls, err)
	}
}

// Failures are classified as provider.Error: a 429's Retry-After is kept,
// overload and server errors are retryable, a 400 and a 401 are not, an
// error event mid-stream is retryable, and no error carries the key the
// server echoed.
func TestErrors(t *testing.T) {
	const key = "sk-ant-secret-key-123"
	cases := []struct {
		name      string
		status    int
		header    http.Header
		body      string
		stream    bool
		code      string
		retryable bool
		after     time.Duration
	}{
		{"rate limited", 429, http.Header{"Retry-After": {"7"}}, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, false, "rate_limit_error", true, 7 * time.Second},
		{"overloaded", 529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false, "overloaded_error", true, 0},
		{"server error", 500, nil, `{"type":"error","error":{"type":"api_error","message":"boom"}}`, false, "api_error", true, 0},
		{"bad request", 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}`, false, "invalid_request_error", false, 0},
		{"bad key echoed", 401, nil, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + key + `; Authorization: Bearer ` + key + `"}}`, false, "authentication_error", false, 0},
		{"mid-stream", 200, http.Header{"Content-Type": {"text/event-stream"}},
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"x\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", true, "overloaded_error", true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header()[k] = v
				}
				if w.Header().Get("Content-Type") == "" {
					w.Header().Set("Content-Type", "application/json")
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c := client(t, srv.URL, nil)
			var onDelta func(string)
			if tc.stream {
				onDelta = func(string) {}
			}
			_, err := c.Complete(context.Background(), turn.ModelRequest{Messages: []turn.Message{{Role: turn.RoleUser, Text: "hi"}}}, onDelta)
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Code != tc.code || pe.Retryable != tc.retryable || pe.RetryAfter != tc.after {
				t.Fatalf("err = %#v; want code %s retryable %v after %v", err, tc.code, tc.retryable, tc.after)
			}
			ce := provider.CallError(err)
			if strings.Contains(err.Error(), key) || strings.Contains(ce.Message, key) || strings.Contains(ce.Code, key) {
				t.Fatalf("the key leaked: %v / %+v", err, ce)
			}
		})
	}
}

// A scripted hang ends at the client's timeout as a retryable failure; a
// response over the cap is terminal; a request with no model is refused
// before anything is sent.
func TestBounds(t *testing.T) {
	srv := testenv.RunModelServer(t, scripted.MustParse("rule slow\n  when user contains hang\n  hang\n\ndefault\n  say "+strings.Repeat("word ", 400)+"\n"))
	ctx := context.Background()
	c := client(t, srv.AnthropicURL(), func(c *anthropic.Config) { c.Timeout = 200 * time.Millisecond; c.MaxResponseBytes = 1000 })
	_, err := c.Complete(ctx, turn.ModelRequest{Messages: []turn.Message{{Role: turn.RoleUser, Text: "hang"}}}, nil)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Code != provider.CodeTimeout || !pe.Retryable || !errors.Is(err, anthropic.ErrTimeout) {
		t.Fatalf("a hung call: %v", err)
	}
	for _, stream := range []func(string){nil, func(string) {}} {
		_, err = c.Complete(ctx, turn.ModelRequest{Messages: []turn.Message{{Role: turn.RoleUser, Text: "talk"}}}, stream)
		if !errors.As(err, &pe) || pe.Code != provider.CodeTooLarge || pe.Retryable || !errors.Is(err, anthropic.ErrResponseTooLarge) {
			t.Fatalf("an answer over the cap (stream %v): %v", stream != nil, err)
		}
	}
	n := srv.Requests()
	noModel := client(t, srv.AnthropicURL(), func(c *anthropic.Config) { c.Model = "" })
	if _, err := noModel.Complete(ctx, turn.ModelRequest{Messages: []turn.Message{{Role: turn.RoleUser, Text: "hi"}}}, nil); !errors.As(err, &pe) || pe.Code != provider.CodeInvalidRequest {
		t.Fatalf("no model: %v", err)
	}
	if srv.Requests() != n {
		t.Fatal("a request with no model was sent")
	}
}

// A node's notice later in the conversation is a system message on the
// wire, never the user's.
func TestNoticeStaysSystem(t *testing.T) {
	srv := testenv.RunModelServer(t, scripted.MustParse("rule told\n  when notice contains [process\n  say noted\n\ndefault\n  say ok\n"))
	c := client(t, srv.AnthropicURL(), nil)
	req := turn.ModelRequest{Messages: []turn.Message{
		{Role: turn.RoleSystem, Text: "You help."},
		{Role: turn.RoleUser, Text: "build it later"},
		{Role: turn.RoleAssistant, Text: "started"},
		{Role: turn.RoleSystem, Text: "[process p-1 (tool build) completed] built"},
	}}
	r, err := c.Complete(context.Background(), req, nil)
	if err != nil || r.Text != "noted" {
		t.Fatalf("%+v, %v", r, err)
	}
	if !strings.Contains(string(srv.Seen()[0].Body), `{"content":[{"text":"[process p-1 (tool build) completed] built","type":"text"}],"role":"system"}`) {
		t.Fatalf("the notice on the wire: %s", srv.Seen()[0].Body)
	}
}

// Cache reads and writes count as input, and are kept apart too.
func TestUsageWithCache(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"m","type":"message","role":"assistant","model":"x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn",` +
			`"usage":{"input_tokens":40,"output_tokens":5,"cache_read_input_tokens":60,"cache_creation_input_tokens":10}}`))
	}))
	defer srv.Close()
	r, err := client(t, srv.URL, nil).Complete(context.Background(), turn.ModelRequest{Messages: []turn.Message{{Role: turn.RoleUser, Text: "hi"}}}, nil)
	if want := (turn.Usage{InputTokens: 110, OutputTokens: 5, CacheReadTokens: 60, CacheWriteTokens: 10}); err != nil || r.Usage != want {
		t.Fatalf("usage %+v, %v; want %+v", r.Usage, err, want)
	}
}
