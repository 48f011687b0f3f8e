package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"

	"github.com/lash-run/lash/turn"
)

var transcriptCmd = &command{
	name:    "transcript",
	args:    "ID",
	summary: "a session's committed conversation",
	doc: `Prints a session's committed conversation, message by message: its index, the turn
that committed it, the role, and its text, tool calls (tool, arguments, call id) or tool
result (call id, tool, output; marked when the call failed or is pending). With --follow
it goes on with the messages of the turns that run after, as they come (answers as they
stream), until interrupted; with --json, then, each message is a line.`,
	min: 1, max: 1,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.BoolVar(&a.followFlag, "follow", false, "go on with new messages as turns run")
	},
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
	if a.followFlag {
		return followTranscript(a, args[0])
	}
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
		out.Messages = append(out.Messages, messageOf(e))
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

// followTranscript prints the committed transcript, then the messages of
// later turns from the live events the LIVE stream keeps and those to
// come. Events of turns the transcript holds are passed over, so a turn
// committed while it starts is printed once.
func followTranscript(a *app, id string) error {
	if _, err := streams.Token(id); err != nil {
		return a.usagef("session id: %v", err)
	}
	printed := map[string]bool{}
	var entries []projector.TranscriptEntry
	if p, h, err := a.head(id); err == nil {
		if entries, err = p.Transcript(h.Session, 0); err != nil {
			return err
		}
	} else if !errors.Is(err, errUnknownSession) {
		return err
	}
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if !a.json {
		row(tw, "#", "TURN", "ROLE", "CONTENT")
	}
	for _, e := range entries {
		printed[e.Turn] = true
		if a.json {
			if err := enc.Encode(messageOf(e)); err != nil {
				return err
			}
			continue
		}
		row(tw, e.Index, e.Turn, e.Message.Role, content(e.Message))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	p := &eventPrinter{w: a.stdout, messagesOnly: true}
	var from uint64
	return a.follow(a.ctx, id, &from, func(r live.Record) error {
		if printed[r.Event.Turn] {
			return nil
		}
		if a.json {
			if m := r.Event.Message; r.Event.Type == live.TypeMessage {
				return enc.Encode(messageJSON{Index: -1, Turn: r.Event.Turn, Role: m.Role, Text: m.Text,
					ToolCalls: liveCalls(m.ToolCalls), CallID: m.CallID, Name: m.Name, Error: m.Error, Pending: m.Pending})
			}
			return nil
		}
		return p.print(r)
	})
}

func messageOf(e projector.TranscriptEntry) messageJSON {
	m := e.Message
	mj := messageJSON{Index: e.Index, Turn: e.Turn, Role: m.Role.String(), Text: m.Text, ToolCalls: []toolCallJSON{},
		CallID: m.CallID, Name: m.Name, Error: m.Error, Pending: m.Pending}
	for _, c := range m.ToolCalls {
		mj.ToolCalls = append(mj.ToolCalls, toolCallJSON{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return mj
}

func liveCalls(calls []live.ToolCall) []toolCallJSON {
	out := []toolCallJSON{}
	for _, c := range calls {
		out = append(out, toolCallJSON{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return out
}
