package scripted_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/turn"
)

// docExample is the example of the package documentation; it must parse.
const docExample = `
# A weather agent: look the weather up, then answer.
rule hello
  when user contains hello
  say Hello! Ask me about the weather.

rule flaky-start
  when user contains weather
  when step = 1
  fail 503 first 1 the model is overloaded
  say Let me check both cities.
  call get_weather {"city": "Oslo"}
  call get_weather {"city": "Lima"}

rule answer
  when tools = 2
  when tool contains "°C"
  delay 20ms
  say "Oslo is cold and Lima is mild.\nAnything else?"
  usage 120 14

rule tool-failed
  when tool contains "error: "
  say I could not get the weather.
  finish stop

rule stuck
  when user contains wait forever
  hang

default
  say I only know about the weather.
`

func user(text string) turn.Message { return turn.Message{Role: turn.RoleUser, Text: text} }

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		line         int
		want         string
	}{
		{"empty", "# nothing\n", 1, "no rules"},
		{"directive before rule", "say hi\n", 1, "before the first rule"},
		{"unknown directive", "rule a\n  say hi\n  sya hi\n", 3, `unknown directive "sya"`},
		{"rule without name", "rule\n say hi\n", 1, "one-word name"},
		{"duplicate name", "rule a\n say x\n\nrule a\n say y\n", 4, "already defined on line 1"},
		{"rule after default", "default\n say x\nrule a\n say y\n", 3, "after the default rule (line 1)"},
		{"default with condition", "default\n when step = 1\n", 2, "no conditions"},
		{"rule does nothing", "rule a\n when step = 1\nrule b\n say x\n", 1, "does nothing"},
		{"bad condition", "rule a\n when weather is nice\n say x\n", 2, `unknown condition "weather"`},
		{"bad text op", "rule a\n when user has x\n say x\n", 2, "contains or is"},
		{"bad operator", "rule a\n when step ~ 1\n say x\n", 2, `unknown operator "~"`},
		{"bad count", "rule a\n when tools = many\n say x\n", 2, "count >= 0"},
		{"bad json", "rule a\n call f {oops}\n", 2, "not valid JSON"},
		{"bad finish", "rule a\n say x\n finish done\n", 3, "unknown finish reason"},
		{"bad usage", "rule a\n say x\n usage 1\n", 3, "two numbers"},
		{"bad delay", "rule a\n say x\n delay soon\n", 3, "positive duration"},
		{"bad status", "rule a\n fail 200\n", 2, "HTTP error status"},
		{"bad first", "rule a\n fail 503 first 0\n say x\n", 2, "count >= 1"},
		{"bad quote", "rule a\n say \"unterminated\n", 2, "bad quoted text"},
		{"hang and say", "rule a\n hang\n say x\n", 1, "hangs"},
		{"always fails and says", "rule a\n fail 500\n say x\n", 1, "always fails"},
		{"hang with argument", "rule a\n hang now\n", 2, "no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scripted.Parse(tc.script)
			var pe *scripted.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse: got %v, want a *ParseError", err)
			}
			if pe.Line != tc.line || !strings.Contains(pe.Msg, tc.want) {
				t.Fatalf("Parse: got %q, want line %d and %q", err, tc.line, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "scripted: line ") {
				t.Fatalf("error %q does not name its line", err)
			}
		})
	}
}

func TestDocExampleParses(t *testing.T) {
	s, err := scripted.Parse(docExample)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"hello", "flaky-start", "answer", "tool-failed", "stuck", "default"}
	if got := s.Rules(); !reflect.DeepEqual(got, want) {
		t.Fatalf("rules %v, want %v", got, want)
	}
}

// weatherConversation is the conversation after the flaky-start rule's calls
// were answered.
func weatherConversation() turn.ModelRequest {
	return turn.ModelRequest{Model: "m", Messages: []turn.Message{
		{Role: turn.RoleSystem, Text: "You are a weather agent."},
		user("weather in Oslo and Lima?"),
		{Role: turn.RoleAssistant, Text: "Let me check both cities.", ToolCalls: []turn.ToolCall{
			{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Oslo"}`},
			{ID: "call_2", Name: "get_weather", Arguments: `{"city": "Lima"}`},
		}},
		{Role: turn.RoleTool, CallID: "call_1", Name: "get_weather", Text: "-3°C"},
		{Role: turn.RoleTool, CallID: "call_2", Name: "get_weather", Text: "18°C"},
	}}
}

func TestRespondMatchesRules(t *testing.T) {
	s := scripted.MustParse(docExample)
	failed := weatherConversation()
	failed.Messages[4] = turn.Message{Role: turn.RoleTool, CallID: "call_2", Name: "get_weather", Text: "no such city", Error: true}

	for _, tc := range []struct {
		name string
		req  turn.ModelRequest
		rule string
		text string
		ids  []string
	}{
		{"user contains", turn.ModelRequest{Messages: []turn.Message{user("well hello there")}}, "hello", "Hello! Ask me about the weather.", nil},
		{"step 1 with calls", turn.ModelRequest{Messages: []turn.Message{user("weather?")}}, "flaky-start", "Let me check both cities.", []string{"call_1", "call_2"}},
		{"tool results", weatherConversation(), "answer", "Oslo is cold and Lima is mild.\nAnything else?", nil},
		{"error tool result", failed, "tool-failed", "I could not get the weather.", nil},
		{"default", turn.ModelRequest{Messages: []turn.Message{user("stocks?")}}, "default", "I only know about the weather.", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := s.Respond(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Rule != tc.rule || rep.Response.Text != tc.text {
				t.Fatalf("got rule %q text %q, want %q %q", rep.Rule, rep.Response.Text, tc.rule, tc.text)
			}
			var ids []string
			for _, c := range rep.Response.ToolCalls {
				ids = append(ids, c.ID)
			}
			if !reflect.DeepEqual(ids, tc.ids) {
				t.Fatalf("call ids %v, want %v", ids, tc.ids)
			}
		})
	}
}

func TestRespondReply(t *testing.T) {
	s := scripted.MustParse(docExample)

	rep, err := s.Respond(turn.ModelRequest{Messages: []turn.Message{user("weather?")}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Fail == nil || *rep.Fail != (scripted.Fail{Status: 503, Message: "the model is overloaded", First: 1}) {
		t.Fatalf("fail cue %+v", rep.Fail)
	}
	if rep.Response.Finish != turn.FinishToolCalls {
		t.Fatalf("finish %q, want tool_calls", rep.Response.Finish)
	}
	// Derived usage: ceil(8 runes / 4) in; ceil((25+16+16) runes / 4) out.
	if want := (turn.Usage{InputTokens: 2, OutputTokens: 15}); rep.Response.Usage != want {
		t.Fatalf("usage %+v, want %+v", rep.Response.Usage, want)
	}

	rep, err = s.Respond(weatherConversation())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Delay != 20*time.Millisecond || rep.Response.Usage != (turn.Usage{InputTokens: 120, OutputTokens: 14}) {
		t.Fatalf("reply %+v", rep)
	}

	rep, err = s.Respond(turn.ModelRequest{Messages: []turn.Message{user("please wait forever")}})
	if err != nil || !rep.Hang {
		t.Fatalf("reply %+v, %v: want a hang", rep, err)
	}
}

func TestRespondConditions(t *testing.T) {
	s := scripted.MustParse(`
rule exact
  when user is "  padded  "
  say exact
rule not-tools
  when not tools >= 1
  when system contains be brief
  when model is small
  say no tools yet
rule late
  when step >= 2
  when tools != 0
  say later
`)
	sys := turn.Message{Role: turn.RoleSystem, Text: "Please be brief."}
	for _, tc := range []struct {
		name string
		req  turn.ModelRequest
		want string // rule, or "" for no match
	}{
		{"is matches exactly", turn.ModelRequest{Messages: []turn.Message{user("  padded  ")}}, "exact"},
		{"is is not contains", turn.ModelRequest{Messages: []turn.Message{user("padded")}}, ""},
		{"negation and system and model", turn.ModelRequest{Model: "small", Messages: []turn.Message{sys, user("x")}}, "not-tools"},
		{"wrong model", turn.ModelRequest{Model: "large", Messages: []turn.Message{sys, user("x")}}, ""},
		{"step and tools", turn.ModelRequest{Model: "small", Messages: []turn.Message{sys, user("x"),
			{Role: turn.RoleAssistant, ToolCalls: []turn.ToolCall{{ID: "a", Name: "f"}}},
			{Role: turn.RoleTool, CallID: "a", Text: "done"}}}, "late"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := s.Respond(tc.req)
			if tc.want == "" {
				if !errors.Is(err, scripted.ErrNoMatch) {
					t.Fatalf("got %+v, %v; want ErrNoMatch", rep, err)
				}
				return
			}
			if err != nil || rep.Rule != tc.want {
				t.Fatalf("got rule %q, %v; want %q", rep.Rule, err, tc.want)
			}
		})
	}
}

func TestRespondIsDeterministic(t *testing.T) {
	s := scripted.MustParse(docExample)
	reqs := []turn.ModelRequest{
		{Messages: []turn.Message{user("weather?")}},
		weatherConversation(),
		{Messages: []turn.Message{user("anything")}},
	}
	for _, req := range reqs {
		first, err := s.Respond(req)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			again, err := s.Respond(req)
			if err != nil || !reflect.DeepEqual(again, first) {
				t.Fatalf("second reply %+v, %v differs from %+v", again, err, first)
			}
		}
	}
	// A fresh parse of the same text answers the same.
	other := scripted.MustParse(docExample)
	for _, req := range reqs {
		a, _ := s.Respond(req)
		b, _ := other.Respond(req)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("two parses disagree: %+v vs %+v", a, b)
		}
	}
}

func TestCallIDsContinueTheConversation(t *testing.T) {
	s := scripted.MustParse("rule more\n call f {}\n call g {\"x\": 1}\n")
	rep, err := s.Respond(weatherConversation()) // holds call_1 and call_2
	if err != nil {
		t.Fatal(err)
	}
	want := []turn.ToolCall{{ID: "call_3", Name: "f", Arguments: "{}"}, {ID: "call_4", Name: "g", Arguments: `{"x": 1}`}}
	if !reflect.DeepEqual(rep.Response.ToolCalls, want) {
		t.Fatalf("calls %+v, want %+v", rep.Response.ToolCalls, want)
	}
}

func TestChunks(t *testing.T) {
	for _, text := range []string{"", "one", "Hello, world!  How are\nyou? ", "  lead", "ünï cödé ok"} {
		got := scripted.Chunks(text)
		if strings.Join(got, "") != text {
			t.Fatalf("Chunks(%q) = %q does not join back", text, got)
		}
	}
	if got, want := scripted.Chunks("Hello, world!  How"), []string{"Hello, ", "world!  ", "How"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Chunks = %q, want %q", got, want)
	}
}

func TestModelComplete(t *testing.T) {
	m := scripted.NewModel(scripted.MustParse(docExample))
	ctx := context.Background()
	req := turn.ModelRequest{Messages: []turn.Message{user("weather?")}}

	// The first match fails, with the scripted status, retryable.
	_, err := m.Complete(ctx, req, nil)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Status != 503 || !pe.Retryable {
		t.Fatalf("first call: %v, want a retryable 503", err)
	}
	if ce := provider.CallError(err); !ce.Retryable || ce.Code != "http_503" {
		t.Fatalf("CallError %+v", ce)
	}
	// The retry answers, streaming its text in chunks.
	var deltas []string
	resp, err := m.Complete(ctx, req, func(s string) { deltas = append(deltas, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 2 || strings.Join(deltas, "") != resp.Text || len(deltas) != 5 {
		t.Fatalf("response %+v, deltas %q", resp, deltas)
	}
	// Reset brings the failure back.
	m.Reset()
	if _, err := m.Complete(ctx, req, nil); !errors.As(err, &pe) {
		t.Fatalf("after Reset: %v, want the failure again", err)
	}

	// No rule: terminal.
	strict := scripted.NewModel(scripted.MustParse("rule a\n when user is a\n say a\n"))
	_, err = strict.Complete(ctx, req, nil)
	if !errors.Is(err, scripted.ErrNoMatch) || provider.CallError(err).Retryable {
		t.Fatalf("no match: %v", err)
	}
}

func TestModelHangEndsWithContext(t *testing.T) {
	m := scripted.NewModel(scripted.MustParse(docExample))
	req := turn.ModelRequest{Messages: []turn.Message{user("wait forever")}}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Complete(ctx, req, nil)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || provider.CallError(err).Retryable {
			t.Fatalf("got %v, want a terminal context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Complete did not return after cancel")
	}

	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err := m.Complete(ctx, req, nil)
	if !errors.Is(err, context.DeadlineExceeded) || provider.CallError(err).Code != provider.CodeDeadlineExceeded {
		t.Fatalf("got %v, want deadline_exceeded", err)
	}
}

func TestModelDelay(t *testing.T) {
	m := scripted.NewModel(scripted.MustParse("rule slow\n delay 30ms\n say done\n"))
	start := time.Now()
	resp, err := m.Complete(context.Background(), turn.ModelRequest{Messages: []turn.Message{user("x")}}, nil)
	if err != nil || resp.Text != "done" {
		t.Fatalf("%+v, %v", resp, err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("answered after %v, before the delay", d)
	}
}
