package turn

import (
	"crypto/sha256"

	"github.com/lash-run/lash/internal/pack"
)

// appendMessage appends m as msgpack.Marshal encodes it
// (TestMessageEncodesAsMsgpack): request hashes cover every message the
// turn adds, and reflection was most of their cost. The bytes are the
// hashes' input, so they must never change (RequestHashing).
func appendMessage(b []byte, m *Message) []byte {
	n := 1 + pack.Count(m.Text != "", len(m.ToolCalls) > 0, m.CallID != "", m.Name != "", m.Error, m.Pending)
	b = pack.Uint8(pack.Str(pack.Map(b, n), "r"), uint8(m.Role))
	if m.Text != "" {
		b = pack.Str(pack.Str(b, "t"), m.Text)
	}
	if len(m.ToolCalls) > 0 {
		b = AppendToolCalls(pack.Str(b, "c"), m.ToolCalls)
	}
	if m.CallID != "" {
		b = pack.Str(pack.Str(b, "i"), m.CallID)
	}
	if m.Name != "" {
		b = pack.Str(pack.Str(b, "n"), m.Name)
	}
	if m.Error {
		b = pack.Bool(pack.Str(b, "e"), true)
	}
	if m.Pending {
		b = pack.Bool(pack.Str(b, "p"), true)
	}
	return b
}

// AppendToolCalls appends a non-nil list of calls as msgpack encodes it: in
// messages, and in the model answers the driver journals.
func AppendToolCalls(b []byte, calls []ToolCall) []byte {
	b = pack.Array(b, len(calls))
	for i := range calls {
		b = appendToolCall(b, &calls[i])
	}
	return b
}

// AppendToolSpecs appends a non-empty list of tool specs as msgpack encodes
// it: in request hashes, and in the tools' sync answers the driver journals.
func AppendToolSpecs(b []byte, specs []ToolSpec) []byte {
	b = pack.Array(b, len(specs))
	for i := range specs {
		t := &specs[i]
		b = pack.Str(pack.Str(pack.Map(b, 1+pack.Count(t.Description != "", t.Schema != "")), "n"), t.Name)
		if t.Description != "" {
			b = pack.Str(pack.Str(b, "d"), t.Description)
		}
		if t.Schema != "" {
			b = pack.Str(pack.Str(b, "s"), t.Schema)
		}
	}
	return b
}

// appendRequestHead appends req without its messages (as nil), as
// msgpack encodes it: what a model call's hash starts with.
func appendRequestHead(b []byte, req *ModelRequest) []byte {
	b = pack.Nil(pack.Str(pack.Str(pack.Str(pack.Map(b, 3+pack.Count(len(req.Tools) > 0)), "m"), req.Model), "g"))
	if len(req.Tools) > 0 {
		b = AppendToolSpecs(pack.Str(b, "t"), req.Tools)
	}
	s := &req.Sampling
	b = pack.Map(pack.Str(b, "s"), pack.Count(s.Temperature != nil, s.TopP != nil, s.MaxTokens != 0, len(s.Stop) > 0))
	if s.Temperature != nil {
		b = pack.Float64(pack.Str(b, "t"), *s.Temperature)
	}
	if s.TopP != nil {
		b = pack.Float64(pack.Str(b, "p"), *s.TopP)
	}
	if s.MaxTokens != 0 {
		b = pack.Int(pack.Str(b, "m"), s.MaxTokens)
	}
	if len(s.Stop) > 0 {
		b = pack.Array(pack.Str(b, "s"), len(s.Stop))
		for _, stop := range s.Stop {
			b = pack.Str(b, stop)
		}
	}
	return b
}

func appendToolCall(b []byte, c *ToolCall) []byte {
	b = pack.Map(b, 2+pack.Count(c.Arguments != ""))
	b = pack.Str(pack.Str(pack.Str(pack.Str(b, "i"), c.ID), "n"), c.Name)
	if c.Arguments != "" {
		b = pack.Str(pack.Str(b, "a"), c.Arguments)
	}
	return b
}

func appendDecision(b []byte, d *Decision) []byte {
	b = pack.Map(b, 3+pack.Count(d.Mode != 0, d.Payload != ""))
	b = pack.Str(pack.Str(pack.Str(pack.Str(b, "i"), d.ID), "c"), d.CallID)
	b = pack.Uint8(pack.Str(b, "a"), uint8(d.Action))
	if d.Mode != 0 {
		b = pack.Uint8(pack.Str(b, "m"), uint8(d.Mode))
	}
	if d.Payload != "" {
		b = pack.Str(pack.Str(b, "p"), d.Payload)
	}
	return b
}

// The request hashes of a turn's sync and of the effects every tool round
// makes, over bytes written by hand as canonicalHash's encoder writes the
// same values (TestHandHashesMatch): they were most of a round's
// reflection.

var syncToolsHash = Hash(sha256.Sum256([]byte{byte(KindSyncTools), 0xc0}))

func checkpointHash(at CheckpointKind) Hash {
	return sha256.Sum256([]byte{byte(KindCheckpoint), 0xcc, byte(at)})
}

func callHash(c *ToolCall, d *Decision) Hash {
	var buf [256]byte
	b := pack.Str(pack.Map(append(buf[:0], byte(KindToolCall)), 2), "c")
	b = pack.Str(appendToolCall(b, c), "d")
	if d == nil {
		b = pack.Nil(b)
	} else {
		b = appendDecision(b, d)
	}
	return sha256.Sum256(b)
}

func callsHash(hashes []Hash) Hash {
	var buf [256]byte
	b := append(buf[:0], byte(KindToolCalls))
	if hashes == nil {
		b = pack.Nil(b)
	} else {
		b = pack.Array(b, len(hashes))
	}
	for i := range hashes {
		b = pack.Bin(b, hashes[i][:])
	}
	return sha256.Sum256(b)
}

// AppendMessages appends msgs as msgpack encodes a []Message (nil as nil):
// what a request hash takes in, and a commit's messages.
func AppendMessages(b []byte, msgs []Message) []byte {
	if msgs == nil {
		return pack.Nil(b)
	}
	b = pack.Array(b, len(msgs))
	for i := range msgs {
		b = appendMessage(b, &msgs[i])
	}
	return b
}

// AppendUsage appends u as msgpack encodes it.
func AppendUsage(b []byte, u Usage) []byte {
	b = pack.Map(b, 2+pack.Count(u.CacheReadTokens != 0, u.CacheWriteTokens != 0, u.ReasoningTokens != 0))
	b = pack.Int64(pack.Str(b, "i"), u.InputTokens)
	b = pack.Int64(pack.Str(b, "o"), u.OutputTokens)
	if u.CacheReadTokens != 0 {
		b = pack.Int64(pack.Str(b, "r"), u.CacheReadTokens)
	}
	if u.CacheWriteTokens != 0 {
		b = pack.Int64(pack.Str(b, "w"), u.CacheWriteTokens)
	}
	if u.ReasoningTokens != 0 {
		b = pack.Int64(pack.Str(b, "x"), u.ReasoningTokens)
	}
	return b
}
