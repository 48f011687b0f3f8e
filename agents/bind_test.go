package agents

import (
	"strings"
	"testing"
)

func TestBind(t *testing.T) {
	for _, c := range []struct {
		current, asked string
		turns          int
		signed         bool
		spec, refused  string // refused: a part of the reason
	}{
		{"", "", 0, false, "", ""},
		{"support", "", 3, false, "support", ""},
		{"", "support", 0, false, "support", ""},
		{"support@2", "support", 5, false, "support", ""},
		{"support", "support@2", 5, true, "support@2", ""},
		{"support", "support@2", 5, false, "support", "a pin (support@2) comes from operators"},
		{"", "support@dd9e694d", 0, false, "", "comes from operators"},
		{"support", "research", 1, true, "support", "cannot move it to agent research"},
		{"", "research", 2, true, "", "runs the deployment's default agent"},
		{"support", "research", 0, false, "research", ""},
		{"", "bad name", 0, false, "", "agent name"},
		{"", "a@0", 0, true, "", "after @"},
		{"", strings.Repeat("a", MaxNameBytes+1), 0, false, "", "1 to 64 bytes"},
	} {
		spec, refused := Bind(c.current, c.asked, c.turns, c.signed)
		if spec != c.spec || (c.refused == "") != (refused == "") || !strings.Contains(refused, c.refused) {
			t.Errorf("Bind(%q, %.20q, %d, %v) = %q, %q; want %q, %q", c.current, c.asked, c.turns, c.signed, spec, refused, c.spec, c.refused)
		}
	}
}
