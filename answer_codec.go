package lash

import (
	"github.com/lash-run/lash/internal/pack"
	"github.com/lash-run/lash/turn"
	"github.com/vmihailenco/msgpack/v5"
)

// encodeAnswer encodes a as msgpack.Marshal does. The answers of tool
// syncs, model calls and tool calls, with the checkpoint's answer they
// carry when it found nothing, are written by hand
// (TestAnswerEncodesAsMsgpack): they are most records, and reflection was
// most of their cost. The rest (messages, decisions, inputs, a program's
// end) go through msgpack.
func encodeAnswer(a *answer) ([]byte, error) {
	if b, ok := a.append(make([]byte, 0, 128+len(a.Request))); ok {
		return b, nil
	}
	return msgpack.Marshal(a)
}

// plain says a holds only what append writes: strings, numbers, flags,
// tools and model answers. Such an answer reads back from its record as it is,
// but for empty slices, which come back nil: a run that wrote its record
// uses it as it is, without decoding the record, after asNil.
func (a *answer) plain() bool {
	for ; a != nil; a = a.Next {
		if len(a.Messages) > 0 || len(a.Decisions) > 0 || len(a.Refused) > 0 || len(a.Inputs) > 0 || a.End != nil {
			return false
		}
	}
	return true
}

// asNil makes a's empty slices nil, as its record reads back.
func (a *answer) asNil() {
	for ; a != nil; a = a.Next {
		a.Tools, a.Messages, a.Decisions, a.Refused, a.Inputs = nilIfEmpty(a.Tools), nilIfEmpty(a.Messages),
			nilIfEmpty(a.Decisions), nilIfEmpty(a.Refused), nilIfEmpty(a.Inputs)
		if a.Response != nil {
			a.Response.ToolCalls = nilIfEmpty(a.Response.ToolCalls)
		}
	}
}

func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

// append appends a, or says it holds a field it does not write.
func (a *answer) append(b []byte) ([]byte, bool) {
	if len(a.Messages) > 0 || len(a.Decisions) > 0 || len(a.Refused) > 0 || len(a.Inputs) > 0 || a.End != nil {
		return nil, false
	}
	b = pack.Map(b, pack.Count(len(a.Tools) > 0, a.Response != nil, a.CallErr != nil, a.Result != nil, a.TimedOut, a.Cursor != 0,
		a.Cancel != nil, a.Took != 0, a.Request != "", a.Next != nil))
	if len(a.Tools) > 0 {
		// Every turn's first record: the tools the node offers.
		b = turn.AppendToolSpecs(pack.Str(b, "tools"), a.Tools)
	}
	if r := a.Response; r != nil {
		b = appendResponse(pack.Str(b, "resp"), r)
	}
	if e := a.CallErr; e != nil {
		b = appendCallError(pack.Str(b, "err"), e)
	}
	if r := a.Result; r != nil {
		b = pack.Map(pack.Str(b, "res"), 2+pack.Count(r.Output != ""))
		b = pack.Uint8(pack.Str(pack.Str(pack.Str(b, "i"), r.CallID), "s"), uint8(r.Status))
		if r.Output != "" {
			b = pack.Str(pack.Str(b, "o"), r.Output)
		}
	}
	if a.TimedOut {
		b = pack.Bool(pack.Str(b, "to"), true)
	}
	if a.Cursor != 0 {
		b = pack.Uint64(pack.Str(b, "cur"), a.Cursor)
	}
	if a.Cancel != nil {
		b = pack.Str(pack.Str(b, "cancel"), *a.Cancel)
	}
	if a.Took != 0 {
		b = pack.Int64(pack.Str(b, "took"), int64(a.Took))
	}
	if a.Request != "" {
		b = pack.Str(pack.Str(b, "req"), a.Request)
	}
	if a.Next != nil {
		var ok bool
		if b, ok = a.Next.append(pack.Str(b, "next")); !ok {
			return nil, false
		}
	}
	return b, true
}

func appendResponse(b []byte, r *turn.ModelResponse) []byte {
	b = pack.Map(b, 1+pack.Count(r.Text != "", len(r.ToolCalls) > 0, r.Finish != ""))
	if r.Text != "" {
		b = pack.Str(pack.Str(b, "t"), r.Text)
	}
	if len(r.ToolCalls) > 0 {
		b = turn.AppendToolCalls(pack.Str(b, "c"), r.ToolCalls)
	}
	if r.Finish != "" {
		b = pack.Str(pack.Str(b, "f"), string(r.Finish))
	}
	return turn.AppendUsage(pack.Str(b, "u"), r.Usage)
}

func appendCallError(b []byte, e *turn.CallError) []byte {
	b = pack.Map(b, pack.Count(e.Retryable, e.Code != "", e.Message != "", e.RetryAfter != 0))
	if e.Retryable {
		b = pack.Bool(pack.Str(b, "r"), true)
	}
	if e.Code != "" {
		b = pack.Str(pack.Str(b, "c"), e.Code)
	}
	if e.Message != "" {
		b = pack.Str(pack.Str(b, "m"), e.Message)
	}
	if e.RetryAfter != 0 {
		b = pack.Int64(pack.Str(b, "ra"), int64(e.RetryAfter))
	}
	return b
}
