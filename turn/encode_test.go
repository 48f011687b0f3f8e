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
		// The same strings as a call and the decision that resumed it, and
		// as a request's head.
		c := ToolCall{ID: id, Name: name, Arguments: args}
		d := &Decision{ID: text, CallID: id, Action: Action(role), Mode: ResumeMode(calls), Payload: args}
		sameHashes(t, &c, d)
		req := ModelRequest{Model: name, Sampling: Sampling{MaxTokens: int(calls) - 100}}
		for range calls % 5 {
			req.Tools = append(req.Tools, ToolSpec{Name: name, Description: text, Schema: args})
			req.Sampling.Stop = append(req.Sampling.Stop, text)
		}
		if isErr {
			f := float64(role) / 3
			req.Sampling.Temperature, req.Sampling.TopP = &f, &f
		}
		same(t, appendRequestHead(nil, &req), &req)
	})
}

// A model request without its messages encodes as msgpack encodes it: the
// start of every model call's hash.
func TestRequestHeadEncodesAsMsgpack(t *testing.T) {
	zero, temp, topP := 0.0, 0.7, 1e-300
	long := strings.Repeat("s", 70000)
	for _, req := range []ModelRequest{
		{},
		{Model: "m", Messages: []Message{{Role: RoleUser, Text: "dropped"}}},
		{Model: "gpt", Tools: []ToolSpec{{Name: "weather", Description: "today's", Schema: `{"type":"object"}`}, {Name: "n"}, {Schema: long}}},
		{Tools: make([]ToolSpec, 17), Sampling: Sampling{Temperature: &zero, TopP: &topP, MaxTokens: 1 << 20, Stop: []string{"a", ""}}},
		{Sampling: Sampling{Temperature: &temp, MaxTokens: -3, Stop: []string{}}, Tools: []ToolSpec{}},
	} {
		head := req
		head.Messages = nil
		same(t, appendRequestHead(nil, &req), &head)
	}
}

// callRequest is what one tool call's hash covers, by reflection.
type callRequest struct {
	Call     ToolCall  `msgpack:"c"`
	Decision *Decision `msgpack:"d"`
}

func sameHashes(t *testing.T, c *ToolCall, d *Decision) {
	t.Helper()
	if got, want := callHash(c, d), canonicalHash(KindToolCall, callRequest{Call: *c, Decision: d}); got != want {
		t.Fatalf("callHash(%+v, %+v) = %x, canonicalHash %x", c, d, got, want)
	}
	if got, want := callHash(c, nil), canonicalHash(KindToolCall, callRequest{Call: *c}); got != want {
		t.Fatalf("callHash(%+v, nil) = %x, canonicalHash %x", c, got, want)
	}
}

// The hand-written request hashes of a round's effects are the ones
// canonicalHash gave before them: a journal recorded by either replays.
func TestHandHashesMatch(t *testing.T) {
	if got, want := syncToolsHash, canonicalHash(KindSyncTools, nil); got != want {
		t.Errorf("sync tools: %x, want %x", got, want)
	}
	for at := range CheckpointKind(255) {
		if got, want := checkpointHash(at), canonicalHash(KindCheckpoint, at); got != want {
			t.Fatalf("checkpoint %d: %x, want %x", at, got, want)
		}
	}
	long := strings.Repeat("x", 70000)
	for _, c := range []ToolCall{{}, {ID: "c1", Name: "weather"}, {ID: "c1", Name: "weather", Arguments: `{"city":"Oslo"}`}, {ID: long, Name: "n", Arguments: long}} {
		for _, d := range []*Decision{{}, {ID: "d1", CallID: "c1", Action: Resume}, {ID: "d1", CallID: "c1", Action: 2, Mode: 1, Payload: long}} {
			sameHashes(t, &c, d)
		}
	}
	for _, hs := range [][]Hash{nil, {}, {{1}}, make([]Hash, 16), make([]Hash, 70000)} {
		if got, want := callsHash(hs), canonicalHash(KindToolCalls, hs); got != want {
			t.Errorf("%d calls: %x, want %x", len(hs), got, want)
		}
	}
}

func same(t *testing.T, got []byte, v any) {
	t.Helper()
	want, err := msgpack.Marshal(v)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%.100v:\n got %x\nwant %x (%v)", v, got[:min(len(got), 80)], want[:min(len(want), 80)], err)
	}
}
