package provider_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

func TestCallError(t *testing.T) {
	if provider.CallError(nil) != nil {
		t.Fatal("CallError(nil) is not nil")
	}
	for _, tc := range []struct {
		name      string
		err       error
		retryable bool
		code      string
	}{
		{"429", provider.StatusError(429, "", ""), true, "http_429"},
		{"408", provider.StatusError(408, "", ""), true, "http_408"},
		{"409", provider.StatusError(409, "", ""), true, "http_409"},
		{"502 with code", provider.StatusError(502, "upstream", "bad gateway"), true, "upstream"},
		{"400", provider.StatusError(400, "", ""), false, "http_400"},
		{"401", provider.StatusError(401, "invalid_api_key", ""), false, "invalid_api_key"},
		{"wrapped", fmt.Errorf("driver: %w", provider.StatusError(503, "", "")), true, "http_503"},
		{"cancel", provider.ContextError(context.Canceled), false, provider.CodeCanceled},
		{"bare cancel", fmt.Errorf("x: %w", context.Canceled), false, provider.CodeCanceled},
		{"bare deadline", context.DeadlineExceeded, false, provider.CodeDeadlineExceeded},
		{"unknown", errors.New("boom"), false, provider.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ce := provider.CallError(tc.err)
			if ce.Retryable != tc.retryable || ce.Code != tc.code || ce.Message == "" {
				t.Fatalf("CallError(%v) = %+v", tc.err, ce)
			}
		})
	}
	if err := provider.ContextError(context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v does not unwrap to context.Canceled", err)
	}
}

func TestLateResultText(t *testing.T) {
	m := turn.Message{Role: turn.RoleTool, CallID: "call_7", Name: "book", Text: "sold out (again)", Error: true}
	text := provider.LateResultText(m)
	if want := "[late result for tool call call_7 (book)]: error: sold out (again)"; text != want {
		t.Fatalf("LateResultText = %q, want %q", text, want)
	}
	id, name, result, ok := provider.ParseLateResult(text)
	if !ok || id != "call_7" || name != "book" || result != "error: sold out (again)" {
		t.Fatalf("ParseLateResult = %q %q %q %v", id, name, result, ok)
	}
	for _, s := range []string{"hello", "[late result for tool call ", "[late result for tool call x (y) no"} {
		if _, _, _, ok := provider.ParseLateResult(s); ok {
			t.Fatalf("ParseLateResult(%q) parsed", s)
		}
	}
}

func TestLateResults(t *testing.T) {
	msgs := []turn.Message{
		{Role: turn.RoleAssistant, ToolCalls: []turn.ToolCall{{ID: "a"}, {ID: "b"}}},
		{Role: turn.RoleTool, CallID: "a", Pending: true},
		{Role: turn.RoleTool, CallID: "b"},
		{Role: turn.RoleUser, Text: "?"},
		{Role: turn.RoleTool, CallID: "a"},
	}
	got := provider.LateResults(msgs)
	want := []bool{false, false, false, false, true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("LateResults = %v, want %v", got, want)
	}
	// A model that uses an answered call's id again makes a new call: its
	// result answers it, and is not late.
	again := []turn.Message{
		{Role: turn.RoleAssistant, ToolCalls: []turn.ToolCall{{ID: "call_0"}}},
		{Role: turn.RoleTool, CallID: "call_0"},
		{Role: turn.RoleAssistant, ToolCalls: []turn.ToolCall{{ID: "call_0"}}},
		{Role: turn.RoleTool, CallID: "call_0"},
		{Role: turn.RoleTool, CallID: "call_0"},
	}
	if got, want := provider.LateResults(again), []bool{false, false, false, false, true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("LateResults with an id used again = %v, want %v", got, want)
	}
}
