package sessionlog

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// Entries encode as msgpack encodes them: logs written before and after
// the hand-written encoding read the same.
func TestEntryEncodesAsMsgpack(t *testing.T) {
	for _, e := range []Entry{
		{},
		{Kind: KindFence, Token: 7, Owner: "node-a/01J", Settings: []byte{1, 2}, SetAside: []uint64{3, 1 << 40}},
		{Kind: KindCommit, Token: 1 << 63, Turn: strings.Repeat("t", 40), Hash: [32]byte{1}, Body: []byte(strings.Repeat("b", 300)), BodySize: -1},
		{Kind: KindConsume, Owner: strings.Repeat("o", 70000), Body: []byte{}, Settings: []byte{}, SetAside: make([]uint64, 17)},
	} {
		same(t, &e)
	}
}

func FuzzEntryEncodesAsMsgpack(f *testing.F) {
	f.Add(uint8(2), uint64(9), "node", "in-1", []byte("body"), int64(0), []byte("v"), uint64(4), uint8(2))
	f.Fuzz(func(t *testing.T, kind uint8, token uint64, owner, turn string, body []byte, size int64, settings []byte, aside uint64, n uint8) {
		e := Entry{Kind: Kind(kind), Token: token, Owner: owner, Turn: turn, Body: body, BodySize: size, Settings: settings}
		copy(e.Hash[:], body)
		for i := range n % 20 {
			e.SetAside = append(e.SetAside, aside+uint64(i))
		}
		same(t, &e)
	})
}

func same(t *testing.T, e *Entry) {
	t.Helper()
	want, err := msgpack.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := encodeEntry(e); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%.80v:\n got %x, %v\nwant %x", e, got[:min(len(got), 80)], err, want[:min(len(want), 80)])
	}
}

// Commit bodies encode as msgpack encodes them, by hand or not.
func TestTurnBodyEncodesAsMsgpack(t *testing.T) {
	msgs := []turn.Message{{Role: turn.RoleUser, Text: "hi"}, {Role: turn.RoleAssistant, ToolCalls: []turn.ToolCall{{ID: "c", Name: "w", Arguments: "{}"}}}}
	for _, b := range []TurnBody{
		{},
		{Outcome: turn.Outcome{Status: turn.StatusDone, Termination: turn.Termination{Reason: turn.NaturalEnd}, Messages: msgs,
			Usage: turn.Usage{InputTokens: 10, OutputTokens: -2, CacheReadTokens: 4, ReasoningTokens: 1 << 33}, Iterations: 300}, InputCursor: 9,
			Inputs: []InputUse{{Seq: 9, Key: "k", Hash: [32]byte{7}}, {Seq: 10, Duplicate: 9, Refused: "duplicate", Decision: true}}},
		{Outcome: turn.Outcome{Termination: turn.Termination{Code: "x", Detail: strings.Repeat("d", 40)}, Messages: []turn.Message{}, Suspended: []turn.SuspendedCall{}}},
		{Outcome: turn.Outcome{Suspended: []turn.SuspendedCall{{Call: turn.ToolCall{ID: "c"}, Iteration: 2}}}},
		{Inputs: make([]InputUse, 17)},
		{InputCursor: 3, Agent: "support@12"},
		{Inputs: make([]InputUse, 2), Agent: "a"},
		{Labels: []Label{{Key: "team", Value: "care"}, {Key: "z", Value: ""}}},
	} {
		want, err := msgpack.Marshal(&b)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := EncodeTurnBody(&b); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%.80v:\n got %x, %v\nwant %x", b, got[:min(len(got), 80)], err, want[:min(len(want), 80)])
		}
	}
}

func FuzzTurnBodyEncodesAsMsgpack(f *testing.F) {
	f.Add(uint8(3), uint8(1), "code", "hi", int64(5), 2, uint64(7), "k", uint64(0), "", true, uint8(2))
	f.Fuzz(func(t *testing.T, status, reason uint8, code, text string, tokens int64, iters int, seq uint64, key string, dup uint64, refused string, decision bool, n uint8) {
		b := TurnBody{Outcome: turn.Outcome{Status: turn.RunStatus(status), Termination: turn.Termination{Reason: turn.Reason(reason), Code: code, Detail: text},
			Usage: turn.Usage{InputTokens: tokens, OutputTokens: -tokens}, Iterations: iters}, InputCursor: seq}
		for i := range n % 10 {
			b.Outcome.Messages = append(b.Outcome.Messages, turn.Message{Role: turn.Role(i), Text: text, CallID: key})
			b.Inputs = append(b.Inputs, InputUse{Seq: seq + uint64(i), Key: key, Duplicate: dup, Refused: refused, Decision: decision})
		}
		want, err := msgpack.Marshal(&b)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := EncodeTurnBody(&b); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("got %x, %v\nwant %x", got[:min(len(got), 80)], err, want[:min(len(want), 80)])
		}
	})
}
