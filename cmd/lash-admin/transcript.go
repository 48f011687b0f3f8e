package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/lash-run/lash/turn"
)

var transcriptCmd = &command{
	name:    "transcript",
	args:    "ID",
	summary: "a session's committed conversation",
	doc: `Prints a session's committed conversation, message by message: its index, the turn
that committed it, the role, and its text, tool calls (tool, arguments, call id) or tool
result (call id, tool, output; marked when the call failed or is pending).`,
	min: 1, max: 1,
	run: runTranscript,
}

type messageJSON struct {
	Index     int            `json:"index"`
	Turn      string         `json:"turn"`
	Role      string         `json:"role"`
	Text      string         `json:"text"`
	ToolCalls []toolCallJSON `json:"tool_calls"`
	// CallID and Name identify the call a tool message answers.
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Error   bool   `json:"error"`
	Pending bool   `json:"pending"`
}

type toolCallJSON struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type transcriptJSON struct {
	Session  string        `json:"session"`
	Messages []messageJSON `json:"messages"`
}

func runTranscript(a *app, args []string) error {
	p, h, err := a.head(args[0])
	if err != nil {
		return err
	}
	entries, err := p.Transcript(h.Session, 0)
	if err != nil {
		return err
	}
	out := transcriptJSON{Session: h.Session, Messages: []messageJSON{}}
	for _, e := range entries {
		m := e.Message
		mj := messageJSON{Index: e.Index, Turn: e.Turn, Role: m.Role.String(), Text: m.Text, ToolCalls: []toolCallJSON{},
			CallID: m.CallID, Name: m.Name, Error: m.Error, Pending: m.Pending}
		for _, c := range m.ToolCalls {
			mj.ToolCalls = append(mj.ToolCalls, toolCallJSON{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		out.Messages = append(out.Messages, mj)
	}
	return a.emit(out, func(w io.Writer) {
		row(w, "#", "TURN", "ROLE", "CONTENT")
		for _, e := range entries {
			row(w, e.Index, e.Turn, e.Message.Role, content(e.Message))
		}
	})
}

// content is a message in a line: its text, the calls it makes, or the
// call it answers.
func content(m turn.Message) string {
	var parts []string
	if m.Role == turn.RoleTool {
		head := m.CallID
		if m.Name != "" {
			head += " " + m.Name
		}
		switch {
		case m.Pending:
			head += " (pending)"
		case m.Error:
			head += " (error)"
		}
		return head + ": " + m.Text
	}
	if m.Text != "" {
		parts = append(parts, m.Text)
	}
	for _, c := range m.ToolCalls {
		parts = append(parts, fmt.Sprintf("call %s %s [%s]", c.Name, c.Arguments, c.ID))
	}
	return strings.Join(parts, "; ")
}
