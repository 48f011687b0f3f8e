package gateway

import (
	"fmt"
	"strings"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/live"
)

// AG-UI's events (the @ag-ui/client HttpAgent): one run per request, from
// RUN_STARTED to RUN_FINISHED (or RUN_ERROR), with text messages, tool
// calls and their results between; a call that waits for a person ends
// the run with an interrupt, answered by the next run's resume. aguiMapper
// turns a run's live events into them; it is pure.

type aguiMapper struct {
	thread, run string
	text        string // the open text message, if any
	textFrom    string
	n           int
	turn        string
	last        string            // the last assistant message: tool calls' parent
	tools       map[string]string // call id -> tool, of calls announced
	interrupts  []map[string]any
}

func newAGUIMapper(thread, run string) *aguiMapper {
	return &aguiMapper{thread: thread, run: run, tools: map[string]string{}}
}

func (a *aguiMapper) started() []chunk {
	return []chunk{{"type": "RUN_STARTED", "threadId": a.thread, "runId": a.run}}
}

func (a *aguiMapper) id(kind string) string {
	a.n++
	return fmt.Sprintf("%s-%s-%d", a.turn, kind, a.n)
}

func (a *aguiMapper) begin(ev live.Event, out []chunk) []chunk {
	if ev.Turn != "" && ev.Turn != a.turn {
		a.turn = ev.Turn
		out = append(out, chunk{"type": "CUSTOM", "name": "lash.turn", "value": map[string]string{"session": ev.Session, "turn": ev.Turn}})
	}
	return out
}

func (a *aguiMapper) endText(out []chunk) []chunk {
	if a.text != "" {
		out = append(out, chunk{"type": "TEXT_MESSAGE_END", "messageId": a.text})
		a.text, a.textFrom = "", ""
	}
	return out
}

func (a *aguiMapper) event(ev live.Event) []chunk {
	out := a.begin(ev, nil)
	switch ev.Type {
	case live.TypeTextDelta:
		from := answerOf(ev)
		if a.text != "" && a.textFrom != from {
			out = a.endText(out)
		}
		if a.text == "" {
			a.text, a.textFrom = a.id("msg"), from
			a.last = a.text
			out = append(out, chunk{"type": "TEXT_MESSAGE_START", "messageId": a.text, "role": "assistant"})
		}
		out = append(out, chunk{"type": "TEXT_MESSAGE_CONTENT", "messageId": a.text, "delta": ev.Text})
	case live.TypeMessage:
		if ev.Message != nil {
			out = a.message(ev.Message, out)
		}
	case "tool_suspended":
		tool := a.tools[ev.CallID]
		if lash.Awaiting(tool, ev.Detail) == "decision" {
			msg := "the call waits for a decision"
			if tool != "" {
				msg = tool + " waits for a decision"
			}
			a.interrupts = append(a.interrupts, map[string]any{"id": askID(ev), "reason": "tool_approval",
				"toolCallId": ev.CallID, "message": msg})
		}
	case live.TypeTurnFailed:
		out = a.endText(out)
	}
	return out
}

func (a *aguiMapper) message(m *live.Message, out []chunk) []chunk {
	switch m.Role {
	case "assistant":
		if a.text != "" {
			out = a.endText(out)
		} else if m.Text != "" || len(m.ToolCalls) > 0 {
			a.last = a.id("msg")
			if m.Text != "" {
				out = append(out, chunk{"type": "TEXT_MESSAGE_START", "messageId": a.last, "role": "assistant"},
					chunk{"type": "TEXT_MESSAGE_CONTENT", "messageId": a.last, "delta": m.Text},
					chunk{"type": "TEXT_MESSAGE_END", "messageId": a.last})
			}
		}
		for _, c := range m.ToolCalls {
			a.tools[c.ID] = c.Name
			start := chunk{"type": "TOOL_CALL_START", "toolCallId": c.ID, "toolCallName": c.Name}
			if a.last != "" {
				start["parentMessageId"] = a.last
			}
			out = append(out, start)
			if c.Arguments != "" {
				out = append(out, chunk{"type": "TOOL_CALL_ARGS", "toolCallId": c.ID, "delta": c.Arguments})
			}
			out = append(out, chunk{"type": "TOOL_CALL_END", "toolCallId": c.ID})
		}
	case "tool":
		if m.Pending {
			return out
		}
		out = append(out, chunk{"type": "TOOL_CALL_RESULT", "messageId": "result-" + m.CallID, "toolCallId": m.CallID,
			"content": m.Text, "role": "tool"})
	}
	return out
}

// finish ends the run at the commit that answers it.
func (a *aguiMapper) finish(ev live.Event) []chunk {
	out := a.begin(ev, nil)
	out = a.endText(out)
	switch {
	case refusal(ev) != "":
		return append(out, chunk{"type": "RUN_ERROR", "message": "the input was refused: " + refusal(ev), "code": "input_refused"})
	case ev.Code != "" && ev.Termination == "error":
		return append(out, chunk{"type": "RUN_ERROR", "message": "the turn failed: " + ev.Code, "code": ev.Code})
	case ev.Termination == "cancelled":
		return append(out, chunk{"type": "RUN_FINISHED", "threadId": a.thread, "runId": a.run, "outcome": map[string]any{"type": "cancelled"}})
	case ev.Termination == "suspended" && len(a.interrupts) > 0:
		return append(out, chunk{"type": "RUN_FINISHED", "threadId": a.thread, "runId": a.run,
			"outcome": map[string]any{"type": "interrupt", "interrupts": a.interrupts}})
	}
	return append(out, chunk{"type": "RUN_FINISHED", "threadId": a.thread, "runId": a.run})
}

// aguiText is a message's content: a string, or text parts joined.
func aguiText(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if m, ok := p.(map[string]any); ok && m["type"] == "text" {
				if s, ok := m["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}
