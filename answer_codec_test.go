package lash

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// Answers encode as msgpack.Marshal encodes them, written by hand or not:
// records of either read the same.
func TestAnswerEncodesAsMsgpack(t *testing.T) {
	empty, reason := "", "stop"
	long := strings.Repeat("x", 70000)
	for _, a := range []*answer{
		{},
		{Response: &turn.ModelResponse{Usage: turn.Usage{InputTokens: 10, OutputTokens: 2}}},
		{Response: &turn.ModelResponse{Usage: turn.Usage{InputTokens: 10, OutputTokens: 2, CacheReadTokens: 7, CacheWriteTokens: 1 << 35, ReasoningTokens: 1}}},
		{Response: &turn.ModelResponse{Usage: turn.Usage{CacheWriteTokens: 3}}},
		{Response: &turn.ModelResponse{Text: long, Finish: "stop", ToolCalls: []turn.ToolCall{{ID: "c1", Name: "weather", Arguments: `{"city":"Oslo"}`}, {ID: "c2"}},
			Usage: turn.Usage{InputTokens: -1, OutputTokens: 1 << 40}}, Took: time.Millisecond, Request: "model\n" + strings.Repeat("r", 300)},
		{Response: &turn.ModelResponse{ToolCalls: make([]turn.ToolCall, 17)}},
		{CallErr: &turn.CallError{Retryable: true, Code: "rate", Message: "slow down", RetryAfter: time.Second}, Took: -1},
		{CallErr: &turn.CallError{}},
		{Result: &turn.ToolResult{CallID: "c1", Status: turn.ToolOK, Output: "ok"}, Took: 5, Next: &answer{Cursor: 1 << 33}},
		{Result: &turn.ToolResult{Status: turn.ToolPending}, TimedOut: true, Cancel: &empty},
		{Cancel: &reason, Cursor: 7, Next: &answer{Next: &answer{}}},
		{Tools: []turn.ToolSpec{{Name: "weather"}}},
		{Tools: []turn.ToolSpec{{Name: "weather", Description: "today's", Schema: `{"type":"object"}`}, {Schema: long}, {Description: "d"}}, Took: 3},
		{Tools: make([]turn.ToolSpec, 17), Next: &answer{Tools: []turn.ToolSpec{{Name: "n"}}}},
		// Written through msgpack.
		{Messages: []turn.Message{{Role: turn.RoleUser, Text: "hi"}}, Cursor: 3},
		{Refused: []string{"k: too large"}},
		{Inputs: []sessionlog.InputUse{{Seq: 4, Key: "k"}}},
		{Decisions: []turn.Decision{{}}},
		{Result: &turn.ToolResult{CallID: "c"}, Next: &answer{Messages: []turn.Message{{Role: turn.RoleUser, Text: "more"}}, Cursor: 9}},
	} {
		want, err := msgpack.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := encodeAnswer(a); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%+v:\n got %x, %v\nwant %x", a, got[:min(len(got), 100)], err, want[:min(len(want), 100)])
		}
		readsBack(t, a, want)
	}
	// An empty list of calls comes back nil.
	a := &answer{Response: &turn.ModelResponse{Text: "hi", ToolCalls: []turn.ToolCall{}}, Next: &answer{Cursor: 1}}
	data, _ := encodeAnswer(a)
	readsBack(t, a, data)
}

// readsBack checks that a plain answer, as a run that wrote its record
// uses it, is what the record reads back as.
func readsBack(t *testing.T, a *answer, data []byte) {
	t.Helper()
	if !a.plain() {
		return
	}
	a.asNil()
	back, err := decodeAnswer(data)
	if err != nil || !reflect.DeepEqual(back, a) {
		t.Errorf("plain answer %+v reads back as %+v, %v", a, back, err)
	}
}

func FuzzAnswerEncodesAsMsgpack(f *testing.F) {
	f.Add("weather", `{"city":"Oslo"}`, "done", int64(10), int64(-3), uint8(1), uint64(4), int64(1500), true, "model\n", uint8(3))
	f.Fuzz(func(t *testing.T, name, args, text string, in, out int64, status uint8, cursor uint64, took int64, flag bool, req string, shape uint8) {
		var a answer
		if shape&1 != 0 {
			a.Response = &turn.ModelResponse{Text: text, Finish: turn.FinishReason(name), Usage: turn.Usage{InputTokens: in, OutputTokens: out}}
			for range int(status % 20) {
				a.Response.ToolCalls = append(a.Response.ToolCalls, turn.ToolCall{ID: name, Name: text, Arguments: args})
			}
		}
		if shape&2 != 0 {
			a.Result = &turn.ToolResult{CallID: name, Status: turn.ToolStatus(status), Output: args}
		}
		if shape&4 != 0 {
			a.CallErr = &turn.CallError{Retryable: flag, Code: name, Message: text, RetryAfter: time.Duration(took)}
		}
		if shape&8 != 0 {
			a.Cancel = &text
		}
		if shape&16 != 0 {
			a.Next = &answer{Cursor: cursor, TimedOut: flag}
		}
		if shape&32 != 0 {
			a.Refused = []string{text}
		}
		if shape&64 != 0 {
			for range int(status % 20) {
				a.Tools = append(a.Tools, turn.ToolSpec{Name: name, Description: text, Schema: args})
			}
		}
		a.Cursor, a.Took, a.Request, a.TimedOut = cursor, time.Duration(took), req, flag
		want, err := msgpack.Marshal(&a)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := encodeAnswer(&a); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("got %x, %v\nwant %x", got[:min(len(got), 100)], err, want[:min(len(want), 100)])
		}
		readsBack(t, &a, want)
	})
}
