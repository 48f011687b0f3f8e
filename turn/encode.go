package turn

import "github.com/lash-run/lash/internal/pack"

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
	for _, c := range calls {
		b = pack.Map(b, 2+pack.Count(c.Arguments != ""))
		b = pack.Str(pack.Str(pack.Str(pack.Str(b, "i"), c.ID), "n"), c.Name)
		if c.Arguments != "" {
			b = pack.Str(pack.Str(b, "a"), c.Arguments)
		}
	}
	return b
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
