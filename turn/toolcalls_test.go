package turn

import (
	"strings"
	"testing"
)

// startTurn builds a turn on one user message, syncs tools, and returns the
// machine waiting for its first model call.
func startTurn(t *testing.T, cfg Config, tools []ToolSpec) *Machine {
	t.Helper()
	m, err := New(cfg, Start{Session: "s1", Turn: "t1", Input: Input{Messages: []Message{{Role: RoleUser, Text: "hi"}}}})
	if err != nil {
		t.Fatal(err)
	}
	mustDeliver(t, m, ToolsSynced{ID: outstanding(t, m).Head().ID, Tools: tools})
	if e, ok := outstanding(t, m).(*LLMCall); !ok {
		t.Fatalf("outstanding %T, want *LLMCall", e)
	}
	return m
}

func TestCallIDAndNameLength(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		name   string
		call   ToolCall
		refuse string // part of the termination detail; empty when accepted
	}{
		{"id at the limit", ToolCall{ID: long(MaxIDBytes), Name: "ls"}, ""},
		{"name at the limit", ToolCall{ID: "c1", Name: long(MaxIDBytes)}, ""},
		{"id one over", ToolCall{ID: long(MaxIDBytes + 1), Name: "ls"}, "tool call id"},
		{"name one over", ToolCall{ID: "c1", Name: long(MaxIDBytes + 1)}, "tool name"},
		{"10 KB id", ToolCall{ID: long(10 << 10), Name: "ls"}, "10240 bytes"},
		// Length is checked before emptiness, whose message would quote
		// the other field whole.
		{"10 KB name, no id", ToolCall{Name: long(10 << 10)}, "tool name"},
		{"10 KB id, no name", ToolCall{ID: long(10 << 10)}, "tool call id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startTurn(t, Config{}, []ToolSpec{{Name: "ls"}, {Name: long(MaxIDBytes)}})
			resp := &ModelResponse{Text: "calling", ToolCalls: []ToolCall{tc.call}, Finish: FinishToolCalls}
			mustDeliver(t, m, LLMResult{ID: outstanding(t, m).Head().ID, Response: resp})
			e := outstanding(t, m)
			if tc.refuse == "" {
				tcs, ok := e.(*ToolCalls)
				if !ok || len(tcs.Calls) != 1 || tcs.Calls[0].Call != tc.call {
					t.Fatalf("outstanding %s, want the call to run", describeEffect(e))
				}
				return
			}
			done, ok := e.(*Done)
			if !ok {
				t.Fatalf("outstanding %s, want the turn to end", describeEffect(e))
			}
			term := done.Outcome.Termination
			if term.Reason != Error || term.Code != CodeInvalidResponse || !strings.Contains(term.Detail, tc.refuse) {
				t.Fatalf("termination %v, want %s naming %q", term, CodeInvalidResponse, tc.refuse)
			}
			// The refusal names the call without copying it.
			if len(term.Detail) > 200 {
				t.Fatalf("termination detail is %d bytes", len(term.Detail))
			}
			for _, msg := range m.Messages() {
				if len(msg.ToolCalls) > 0 || msg.CallID != "" {
					t.Fatalf("a refused call reached the conversation: %s", describeMessage(msg))
				}
			}
		})
	}
}
