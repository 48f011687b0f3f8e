package projector

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// The hand-written codecs read and write what reflection does.
func TestHandCodecsMatchReflection(t *testing.T) {
	body, err := sessionlog.EncodeTurnBody(&sessionlog.TurnBody{InputCursor: 9, Outcome: turn.Outcome{
		Status: turn.StatusWaiting, Termination: turn.Termination{Reason: turn.Stopped, Code: "c", Detail: "d"},
		Messages:  []turn.Message{{Role: turn.RoleUser, Text: "hi"}, {Role: turn.RoleAssistant, ToolCalls: []turn.ToolCall{{ID: "1", Name: "x"}}}},
		Suspended: []turn.SuspendedCall{{Call: turn.ToolCall{ID: "1", Name: "x"}}},
		Usage:     turn.Usage{InputTokens: 5, OutputTokens: 7, CacheReadTokens: 4, ReasoningTokens: 2}, Iterations: 3,
	}, Agent: "support@2", Labels: []sessionlog.Label{{Key: "team", Value: "care"}}})
	if err != nil {
		t.Fatal(err)
	}
	var s bodySummary
	if err := s.decode(body); err != nil {
		t.Fatal(err)
	}
	o := s.Outcome
	if s.InputCursor != 9 || o.Status != turn.StatusWaiting || o.Termination.Code != "c" || o.Messages != 2 ||
		o.Suspended != 1 || o.Usage.OutputTokens != 7 || o.Usage.CacheReadTokens != 4 || o.Usage.ReasoningTokens != 2 || o.Iterations != 3 ||
		s.Agent != "support@2" || len(s.Labels) != 1 || s.Labels[0].Value != "care" {
		t.Fatalf("summary %+v", s)
	}
	if err := s.decode(append(body, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	info := TurnInfo{Turn: "t1", Ordinal: 4, Seq: 99, Hash: [32]byte{1, 2}, Token: 7, Status: turn.StatusDone,
		Termination: turn.Termination{Reason: turn.NaturalEnd}, Usage: turn.Usage{InputTokens: 1, CacheWriteTokens: 3, ReasoningTokens: 8}, Iterations: 2,
		FirstMessage: 10, Messages: 2, Body: body, Settings: bytes.Repeat([]byte{7}, 32), ByRef: true}
	hand, err := encodeTurnInfo(&info)
	if err != nil {
		t.Fatal(err)
	}
	var back TurnInfo
	if err := msgpack.Unmarshal(hand, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, info) {
		t.Fatalf("hand-encoded TurnInfo reads back as %+v", back)
	}
	refl, _ := msgpack.Marshal(&info)
	if !bytes.Equal(hand, refl) {
		t.Logf("encodings differ in form (both decode the same): %d vs %d bytes", len(hand), len(refl))
	}
}

// A body whose input list claims four billion entries in a few bytes is
// malformed, found at the end of its bytes: the list is not made at the
// length it claims first (which would take hundreds of gigabytes).
func TestForgedListLength(t *testing.T) {
	forged := []byte{0x81, 0xa1, 'i', 0xdd, 0xff, 0xff, 0xff, 0xff} // {"i": array32(0xffffffff)}
	var s bodySummary
	if err := s.decode(forged); err == nil {
		t.Fatal("a body that ends after its input list's length was read")
	}
	d := msgpack.NewDecoder(bytes.NewReader(forged[3:]))
	if uses, err := decodeInputUses(d); err == nil || cap(uses) > 1024 {
		t.Fatalf("decodeInputUses: %d made, %v", cap(uses), err)
	}
}

// What a fold deleted leaves the memo once its batch is written, so a
// burst of deleted sessions or pruned processes leaves no entry behind;
// within the batch a read still sees the deletion, and what the batch
// changed otherwise stays.
func TestMemoForgetsDeleted(t *testing.T) {
	memo := map[string]map[string]any{}
	tx := &Txn{memo: memo, dirty: map[string]map[string]struct{}{}, fold: SessionsFold}
	tx.SetMemo("gone", &SessionHead{})
	tx.SetMemo("kept", &SessionHead{})
	tx.SetMemo("gone", nil)
	if v, ok := tx.Memo("gone"); !ok || v != nil {
		t.Fatalf("within the batch a deleted key reads %v, %v; want nil, true", v, ok)
	}
	if head, err := readHead(tx, "gone"); err != ErrNotFound || head != nil {
		t.Fatalf("readHead of a deleted key within its batch: %v, %v; want ErrNotFound", head, err)
	}
	tx.forgetDeleted()
	if _, ok := memo[SessionsFold]["gone"]; ok {
		t.Fatal("the memo keeps a deleted key after its batch")
	}
	if _, ok := memo[SessionsFold]["kept"]; !ok {
		t.Fatal("the memo lost a key the batch changed")
	}
}
