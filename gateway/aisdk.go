package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/live"
)

// The AI SDK's UI message stream protocol (the `ai` package's
// DefaultChatTransport): one assistant message per response, made of
// chunks. uiMapper turns a response's live events into them; it is pure.
//
// A response is what the session's turns say after a message, through the
// commit that answers it; a response paused for an approval goes on, in
// the same assistant message, after the decision. Its message id is
// "r-<turn>", the first turn that spoke in it, so a replay (a reloaded
// page resuming) names the same message.

// chunk is one UI message chunk.
type chunk map[string]any

type uiMapper struct {
	messageID string // "" until the first event, unless continuing
	started   bool
	stepOpen  bool
	stepSaid  bool   // the open step's model call answered: more opens a new step
	text      string // the open text part, if any
	textFrom  string // its run and model call
	parts     int
	turn      string
	tools     map[string]string // call id -> tool, of calls announced
}

// newUIMapper maps a response; a continuation names its message and the
// calls the client holds in it already (known: call id -> tool), which are
// not announced again.
func newUIMapper(messageID string, known map[string]string) *uiMapper {
	u := &uiMapper{messageID: messageID, tools: map[string]string{}}
	for id, tool := range known {
		u.tools[id] = tool
	}
	return u
}

func (u *uiMapper) begin(ev live.Event, out []chunk) []chunk {
	if !u.started {
		u.started = true
		if u.messageID == "" {
			u.messageID = "r-" + ev.Turn
		}
		out = append(out, chunk{"type": "start", "messageId": u.messageID})
	}
	if ev.Turn != "" && ev.Turn != u.turn {
		u.turn = ev.Turn
		out = append(out, chunk{"type": "message-metadata", "messageMetadata": map[string]string{"session": ev.Session, "turn": ev.Turn}})
	}
	return out
}

// step opens a step for content, closing one whose model call answered.
func (u *uiMapper) step(out []chunk) []chunk {
	if u.stepOpen && u.stepSaid {
		out = append(out, chunk{"type": "finish-step"})
		u.stepOpen = false
	}
	if !u.stepOpen {
		u.stepOpen, u.stepSaid = true, false
		out = append(out, chunk{"type": "start-step"})
	}
	return out
}

func (u *uiMapper) endText(out []chunk) []chunk {
	if u.text != "" {
		out = append(out, chunk{"type": "text-end", "id": u.text})
		u.text, u.textFrom = "", ""
	}
	return out
}

func (u *uiMapper) partID() string {
	u.parts++
	return fmt.Sprintf("%s-%d", u.turn, u.parts)
}

// event maps one live event.
func (u *uiMapper) event(ev live.Event) []chunk {
	var out []chunk
	switch ev.Type {
	case live.TypeTextDelta:
		out = u.begin(ev, out)
		from := answerOf(ev)
		if u.text != "" && u.textFrom != from {
			// Another run answers the call again (the first one died):
			// its answer is a part of its own.
			out = u.endText(out)
		}
		if u.text == "" {
			out = u.step(out)
			u.text, u.textFrom = u.partID(), from
			out = append(out, chunk{"type": "text-start", "id": u.text})
		}
		out = append(out, chunk{"type": "text-delta", "id": u.text, "delta": ev.Text})
	case live.TypeMessage:
		if ev.Message == nil {
			return nil
		}
		out = u.message(ev, out)
	case "tool_suspended":
		tool, known := u.tools[ev.CallID]
		if lash.Awaiting(tool, ev.Detail) != "decision" {
			return nil
		}
		out = u.begin(ev, out)
		if !known {
			out = u.step(out)
			out = u.announce(out, ev.CallID, "tool", "{}")
		}
		out = append(out, chunk{"type": "tool-approval-request", "approvalId": askID(ev), "toolCallId": ev.CallID})
	case live.TypeTurnFailed:
		out = u.endText(out)
	}
	return out
}

func (u *uiMapper) message(ev live.Event, out []chunk) []chunk {
	m := ev.Message
	switch m.Role {
	case "assistant":
		out = u.begin(ev, out)
		if u.text != "" {
			out = u.endText(out) // its text came as deltas
		} else if m.Text != "" {
			out = u.step(out)
			id := u.partID()
			out = append(out, chunk{"type": "text-start", "id": id}, chunk{"type": "text-delta", "id": id, "delta": m.Text},
				chunk{"type": "text-end", "id": id})
		}
		for _, c := range m.ToolCalls {
			out = u.step(out)
			out = u.announce(out, c.ID, c.Name, c.Arguments)
		}
		u.stepSaid = u.stepOpen
	case "tool":
		if m.Pending {
			return out // a placeholder: the call waits
		}
		out = u.begin(ev, out)
		if _, ok := u.tools[m.CallID]; !ok {
			out = u.step(out)
			out = u.announce(out, m.CallID, m.Name, "{}")
		}
		if m.Error {
			out = append(out, chunk{"type": "tool-output-error", "toolCallId": m.CallID, "errorText": m.Text})
		} else {
			out = append(out, chunk{"type": "tool-output-available", "toolCallId": m.CallID, "output": m.Text})
		}
	}
	// User and system messages are the client's own, or lash's word to
	// the model: not part of the answer.
	return out
}

func (u *uiMapper) announce(out []chunk, callID, tool, args string) []chunk {
	if tool == "" {
		tool = "tool"
	}
	u.tools[callID] = tool
	var input any = args
	if json.Valid([]byte(args)) {
		input = json.RawMessage(args)
	}
	return append(out, chunk{"type": "tool-input-available", "toolCallId": callID, "toolName": tool, "input": input})
}

// finish ends the response at the commit that answers it.
func (u *uiMapper) finish(ev live.Event) []chunk {
	out := u.begin(ev, nil)
	out = u.endText(out)
	if u.stepOpen {
		out = append(out, chunk{"type": "finish-step"})
		u.stepOpen = false
	}
	reason := "stop"
	switch {
	case refusal(ev) != "":
		out = append(out, chunk{"type": "error", "errorText": "the input was refused: " + refusal(ev)})
		reason = "error"
	case ev.Code != "" && ev.Termination == "error":
		out = append(out, chunk{"type": "error", "errorText": "the turn failed: " + ev.Code})
		reason = "error"
	case ev.Termination == "suspended":
		reason = "tool-calls"
	case ev.Termination == "cancelled":
		reason = "other"
	case ev.Termination == "stopped":
		reason = "length"
	}
	return append(out, chunk{"type": "finish", "finishReason": reason})
}

// askID names one asking for a decision: the call and the turn that
// asked, so a call asked again later is answered again (its answer's key
// is the ask's).
func askID(ev live.Event) string { return ev.CallID + "@" + ev.Turn }

// askedCall is the call an ask names.
func askedCall(id string) string {
	if i := strings.LastIndexByte(id, '@'); i > 0 {
		return id[:i]
	}
	return id
}

// answers says whether ev is the commit that ends a response waiting for
// inputs through seq, or the input's consumption without a turn (refused,
// or a duplicate).
func answers(ev live.Event, through uint64) bool {
	return (ev.Type == live.TypeTurnCommitted || ev.Type == live.TypeInputConsumed) && ev.Cursor >= through
}

// refusal is why an input that ends a response was refused ("" if it
// was not).
func refusal(ev live.Event) string {
	if ev.Type == live.TypeInputConsumed {
		return ev.Error
	}
	return ""
}

// answerOf names the model call a text delta belongs to, with the run
// that answers it: a call answered again by another run (the first died)
// is another answer.
func answerOf(ev live.Event) string { return fmt.Sprintf("%s/%d", ev.Node, ev.Effect) }
