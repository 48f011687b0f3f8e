package turn

import (
	"bytes"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// CallError is journaled: RetryAfter travels under its own short key, and
// an error journaled before it existed still decodes, with no wait.
func TestCallErrorRetryAfterIsJournaled(t *testing.T) {
	in := CallError{Retryable: true, Code: "rate_limit_exceeded", Message: "429 slow down", RetryAfter: 7 * time.Second}
	b, err := msgpack.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"r", "c", "m", "ra"} {
		if !bytes.Contains(b, append([]byte{0xa0 | byte(len(key))}, key...)) {
			t.Fatalf("encoding %x has no key %q", b, key)
		}
	}
	var out CallError
	if err := msgpack.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}

	old, err := msgpack.Marshal(map[string]any{"r": true, "c": "http_503", "m": "503 busy"})
	if err != nil {
		t.Fatal(err)
	}
	out = CallError{}
	if err := msgpack.Unmarshal(old, &out); err != nil {
		t.Fatal(err)
	}
	if want := (CallError{Retryable: true, Code: "http_503", Message: "503 busy"}); out != want {
		t.Fatalf("old journal entry decodes to %+v, want %+v", out, want)
	}
	// No wait asked, no key written: entries without one stay byte-identical.
	plain, _ := msgpack.Marshal(&CallError{Retryable: true, Code: "x"})
	if bytes.Contains(plain, []byte("\xa2ra")) {
		t.Fatalf("a zero RetryAfter is encoded: %x", plain)
	}
}

// CheckpointHash is the hash the machine gives its checkpoints: after a
// tool round and before it finishes.
func TestCheckpointHash(t *testing.T) {
	m, err := New(Config{Model: "m"}, Start{Session: "s", Turn: "t", Input: Input{Messages: []Message{{Role: RoleUser, Text: "hi"}}}})
	if err != nil {
		t.Fatal(err)
	}
	answers := []func(id EffectID) Result{
		func(id EffectID) Result { return ToolsSynced{ID: id, Tools: []ToolSpec{{Name: "read"}}} },
		func(id EffectID) Result {
			return LLMResult{ID: id, Response: &ModelResponse{Finish: FinishToolCalls, ToolCalls: []ToolCall{{ID: "c1", Name: "read", Arguments: "{}"}}}}
		},
		nil, // the tool round
		nil, // checkpoint after tools
		func(id EffectID) Result {
			return LLMResult{ID: id, Response: &ModelResponse{Text: "done", Finish: FinishStop}}
		},
		nil, // checkpoint before finish
	}
	var seen []CheckpointKind
	for _, answer := range answers {
		var e Effect
		for e = m.Next(); ; e = m.Next() {
			if _, ok := e.(*Progress); !ok {
				if _, ok := e.(*Emit); !ok {
					break
				}
			}
		}
		var r Result
		switch e := e.(type) {
		case *ToolCalls:
			r = ToolResults{ID: e.H.ID, Results: []ToolResult{{CallID: "c1", Status: ToolOK, Output: "x"}}}
		case *Checkpoint:
			if e.H.Hash != CheckpointHash(e.At) {
				t.Fatalf("checkpoint %s hashes %s, CheckpointHash says %s", e.At, e.H.Hash, CheckpointHash(e.At))
			}
			seen = append(seen, e.At)
			r = CheckpointResult{ID: e.H.ID}
		default:
			r = answer(e.Head().ID)
		}
		if err := m.Deliver(r); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 2 || seen[0] != AfterTools || seen[1] != BeforeFinish || CheckpointHash(AfterTools) == CheckpointHash(BeforeFinish) {
		t.Fatalf("checkpoints %v", seen)
	}
}
