package gateway

import (
	"strings"
	"testing"

	"github.com/lash-run/lash/live"
)

// How each protocol ends a response, by the event that ends it.
func TestResponseEnds(t *testing.T) {
	for _, c := range []struct {
		ev        live.Event
		ui, agui  string // the AI SDK's finish reason (or "error"), AG-UI's last event and outcome
		uiErrText string
	}{
		{live.Event{Type: live.TypeTurnCommitted, Status: "done", Termination: "natural-end", Cursor: 3}, "stop", "RUN_FINISHED", ""},
		{live.Event{Type: live.TypeTurnCommitted, Status: "waiting", Termination: "suspended", Cursor: 3}, "tool-calls", "RUN_FINISHED", ""},
		{live.Event{Type: live.TypeTurnCommitted, Status: "done", Termination: "cancelled", Cursor: 3}, "other", "RUN_FINISHED cancelled", ""},
		{live.Event{Type: live.TypeTurnCommitted, Status: "done", Termination: "stopped", Code: "max_iterations", Cursor: 3}, "length", "RUN_FINISHED", ""},
		{live.Event{Type: live.TypeTurnCommitted, Status: "done", Termination: "error", Code: "provider_error", Cursor: 3}, "error", "RUN_ERROR", "the turn failed: provider_error"},
		{live.Event{Type: live.TypeInputConsumed, Cursor: 3, Error: "bad decision"}, "error", "RUN_ERROR", "the input was refused: bad decision"},
	} {
		if !answers(c.ev, 3) || answers(c.ev, 4) {
			t.Fatalf("%+v answers inputs through 3 only", c.ev)
		}
		out := newUIMapper("", nil).finish(c.ev)
		last := out[len(out)-1]
		if last["type"] != "finish" || last["finishReason"] != c.ui {
			t.Errorf("%+v: AI SDK ends %v", c.ev, out)
		}
		if c.uiErrText != "" && (len(out) < 2 || out[len(out)-2]["errorText"] != c.uiErrText) {
			t.Errorf("%+v: AI SDK error %v", c.ev, out)
		}
		a := newAGUIMapper("t", "r").finish(c.ev)
		got := a[len(a)-1]["type"].(string)
		if o, ok := a[len(a)-1]["outcome"].(map[string]any); ok {
			got += " " + o["type"].(string)
		}
		if got != c.agui {
			t.Errorf("%+v: AG-UI ends %v", c.ev, a)
		}
	}
}

// A model call answered again by another run (the first died mid-answer)
// is a text part of its own; an assistant message whose text streamed
// ends its part without repeating the text.
func TestUIMapperParts(t *testing.T) {
	u := newUIMapper("", nil)
	var out []chunk
	for _, ev := range []live.Event{
		{Type: live.TypeTextDelta, Turn: "in-1", Node: "a", Effect: 2, Text: "Hel"},
		{Type: live.TypeTextDelta, Turn: "in-1", Node: "b", Effect: 2, Text: "Hello"},
		{Type: live.TypeMessage, Turn: "in-1", Node: "b", Message: &live.Message{Role: "assistant", Text: "Hello"}},
	} {
		out = append(out, u.event(ev)...)
	}
	var types []string
	for _, c := range out {
		types = append(types, c["type"].(string))
	}
	want := "start message-metadata start-step text-start text-delta text-end text-start text-delta text-end"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("chunks %s\nwant   %s", got, want)
	}
}
