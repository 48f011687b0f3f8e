package live

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lash-run/lash/turn"
)

// Deltas join back into the text, each at most MaxText bytes and, for
// UTF-8 text, whole runes; bytes that are not UTF-8 are cut anyway.
func TestDeltasJoin(t *testing.T) {
	for _, text := range []string{"", "hi", strings.Repeat("é", MaxText), strings.Repeat("x", 3*MaxText+7), strings.Repeat("\x80", 2*MaxText)} {
		var b strings.Builder
		for _, d := range Deltas(7, text) {
			if len(d.Text) == 0 || len(d.Text) > MaxText || d.Effect != 7 || d.Type != TypeTextDelta {
				t.Fatalf("delta of %d bytes: %+v", len(d.Text), d.Type)
			}
			if utf8.ValidString(text) && !utf8.ValidString(d.Text) {
				t.Fatalf("a delta cuts a rune")
			}
			b.WriteString(d.Text)
		}
		if b.String() != text {
			t.Fatalf("deltas of %d bytes join into %d", len(text), b.Len())
		}
	}
}

// A message's long texts are cut and say so; roles are words.
func TestFromMessage(t *testing.T) {
	m := FromMessage(turn.Message{Role: turn.RoleAssistant, Text: strings.Repeat("a", MaxText+1),
		ToolCalls: []turn.ToolCall{{ID: "c1", Name: "f", Arguments: `{"x":1}`}}})
	if m.Role != "assistant" || len(m.Text) != MaxText || !m.Truncated || m.ToolCalls[0].Arguments != `{"x":1}` {
		t.Fatalf("%+v", m)
	}
	if m := FromMessage(turn.Message{Role: turn.RoleTool, Text: "ok", CallID: "c1"}); m.Truncated || m.Role != "tool" {
		t.Fatalf("%+v", m)
	}
}
