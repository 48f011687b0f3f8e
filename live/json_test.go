package live

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestAppendJSONIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 11, 25, 6, 7, 8, 123400000, time.UTC)
	for _, ev := range []Event{
		{},
		{V: Version, Type: TypeTextDelta, Session: "s", Turn: "t", Node: "n", At: at, Text: "hello", Effect: 7},
		{V: -1, Type: "a<b>&c", Session: "é\u2028\x00\x7f\xff\"\\", At: at.In(time.FixedZone("x", 3600)), Iteration: -3,
			CallID: "c", Name: "n", Detail: "d\n\t", Status: "done", Termination: "natural-end", Code: "x", Cursor: 42, Error: "e",
			Message: &Message{Role: "assistant", Text: strings.Repeat("y", 100), ToolCalls: []ToolCall{{ID: "1", Name: "w", Arguments: `{"a":1}`}, {ID: "2"}},
				CallID: "c", Name: "n", Error: true, Pending: true, Truncated: true}},
		{Message: &Message{ToolCalls: []ToolCall{}}},
	} {
		same(t, &ev)
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("text_delta", "s", "t", "hi <b>", uint64(1), int64(1764050000), 5, "c", "a", "tool", `{"x":"\u00e9"}`, true)
	f.Fuzz(func(t *testing.T, typ, session, turn, text string, effect uint64, unix int64, iter int, callID, role, name, args string, flag bool) {
		ev := Event{V: Version, Type: typ, Session: session, Turn: turn, Node: name, At: time.Unix(unix%(1<<35), int64(iter)).UTC(),
			Text: text, Effect: effect, Iteration: iter, CallID: callID, Detail: args, Cursor: effect / 3, Error: text}
		if flag {
			ev.Message = &Message{Role: role, Text: text, ToolCalls: []ToolCall{{ID: callID, Name: name, Arguments: args}}, Error: flag}
		}
		same(t, &ev)
	})
}

func same(t *testing.T, ev *Event) {
	t.Helper()
	want, werr := json.Marshal(ev)
	got, gerr := ev.AppendJSON(nil)
	if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON:\n got %s, %v\nwant %s, %v", got, gerr, want, werr)
	}
}

// BenchmarkAppendJSON: a message event, by hand and through reflection.
func BenchmarkAppendJSON(b *testing.B) {
	ev := Event{V: Version, Type: TypeMessage, Session: "session-1", Turn: "in-42", Node: "node-a/01JEXAMPLE", At: time.Now().UTC(),
		Message: &Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_abc123", Name: "weather", Arguments: `{"city":"Oslo"}`}}}}
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			_, _ = ev.AppendJSON(make([]byte, 0, 256))
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(&ev)
		}
	})
}
