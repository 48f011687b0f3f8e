package turn

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Messages encode as msgpack encodes them: the request hashes of journals
// recorded before the hand-written encoding must not move.
func TestMessageEncodesAsMsgpack(t *testing.T) {
	msgs := []Message{
		{},
		{Role: RoleUser, Text: "hi"},
		{Role: RoleAssistant, Text: strings.Repeat("x", 70000), ToolCalls: []ToolCall{{ID: "c1", Name: "weather", Arguments: `{"city":"Oslo"}`}, {}}},
		{Role: RoleAssistant, ToolCalls: make([]ToolCall, 16)},
		{Role: RoleTool, CallID: "c1", Name: "weather", Text: "sunny", Error: true, Pending: true},
		{Role: 255, ToolCalls: []ToolCall{}},
	}
	for i := range msgs {
		same(t, appendMessage(nil, &msgs[i]), &msgs[i])
	}
	for _, list := range [][]Message{nil, {}, msgs, make([]Message, 17)} {
		same(t, AppendMessages(nil, list), list)
	}
}

func FuzzMessageEncodesAsMsgpack(f *testing.F) {
	f.Add(uint8(2), "hello", "c1", "weather", `{"a":1}`, true, false, uint8(1))
	f.Fuzz(func(t *testing.T, role uint8, text, id, name, args string, isErr, pending bool, calls uint8) {
		m := Message{Role: Role(role), Text: text, CallID: id, Name: name, Error: isErr, Pending: pending}
		for range calls % 20 {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Name: name, Arguments: args})
		}
		same(t, appendMessage(nil, &m), &m)
	})
}

func same(t *testing.T, got []byte, v any) {
	t.Helper()
	want, err := msgpack.Marshal(v)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%.100v:\n got %x\nwant %x (%v)", v, got[:min(len(got), 80)], want[:min(len(want), 80)], err)
	}
}
