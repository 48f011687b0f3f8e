package live

import (
	"encoding/json"
	"strconv"
)

// AppendJSON appends ev as json.Marshal encodes it (FuzzAppendJSON): a
// node publishes several events a turn, and reflection was most of their
// cost.
func (ev *Event) AppendJSON(b []byte) ([]byte, error) {
	b = strconv.AppendInt(append(b, `{"v":`...), int64(ev.V), 10)
	b = appendString(append(b, `,"type":`...), ev.Type)
	b = appendString(append(b, `,"session":`...), ev.Session)
	b = field(b, "turn", ev.Turn)
	b = field(b, "node", ev.Node)
	b = append(b, `,"at":"`...)
	b, err := ev.At.AppendText(b)
	if err != nil {
		return nil, err // a year json cannot write either
	}
	b = append(b, '"')
	b = field(b, "text", ev.Text)
	if ev.Effect != 0 {
		b = strconv.AppendUint(append(b, `,"effect":`...), ev.Effect, 10)
	}
	if ev.Message != nil {
		b = ev.Message.appendJSON(append(b, `,"message":`...))
	}
	if ev.Iteration != 0 {
		b = strconv.AppendInt(append(b, `,"iteration":`...), int64(ev.Iteration), 10)
	}
	b = field(b, "call_id", ev.CallID)
	b = field(b, "name", ev.Name)
	b = field(b, "detail", ev.Detail)
	b = field(b, "status", ev.Status)
	b = field(b, "termination", ev.Termination)
	b = field(b, "code", ev.Code)
	if ev.Cursor != 0 {
		b = strconv.AppendUint(append(b, `,"cursor":`...), ev.Cursor, 10)
	}
	b = field(b, "error", ev.Error)
	return append(b, '}'), nil
}

func (m *Message) appendJSON(b []byte) []byte {
	b = appendString(append(b, `{"role":`...), m.Role)
	b = field(b, "text", m.Text)
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, c := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(append(b, `{"id":`...), c.ID)
			b = appendString(append(b, `,"name":`...), c.Name)
			b = append(field(b, "arguments", c.Arguments), '}')
		}
		b = append(b, ']')
	}
	b = field(b, "call_id", m.CallID)
	b = field(b, "name", m.Name)
	for _, f := range [...]struct {
		name string
		set  bool
	}{{"error", m.Error}, {"pending", m.Pending}, {"truncated", m.Truncated}} {
		if f.set {
			b = append(append(append(b, `,"`...), f.name...), `":true`...)
		}
	}
	return append(b, '}')
}

// field appends an omitempty string field.
func field(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(append(append(append(b, `,"`...), name...), `":`...), v)
}

// appendString quotes s as encoding/json does: plain ASCII is copied,
// anything that json escapes (quotes, controls, HTML characters, non-ASCII
// that may be invalid UTF-8 or a line separator) goes through json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}
