package live

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lash-run/lash/turn"
)

// Version is the schema version of the events this build publishes.
const Version = 1

// Event types. Machine steps are named for the turn machine's events, with
// '_' for '.': run_started, run_waiting, run_resumed, run_finished,
// llm_retry, tool_started, tool_finished, tool_suspended, tool_blocked,
// tool_cancelled, decision_applied, decision_ignored, messages_injected,
// iteration_grace.
const (
	// TypeMessage: a message the turn added to the conversation.
	TypeMessage = "message"
	// TypeTextDelta: a piece of a model answer as it streams; Effect names
	// the model call. The pieces of one call join into its text.
	TypeTextDelta = "text_delta"
	// TypeNotice: something a hook emitted; Name is its type.
	TypeNotice = "notice"
	// TypeTurnCommitted: the turn was committed with Status and
	// Termination.
	TypeTurnCommitted = "turn_committed"
	// TypeTurnFailed: the run stopped without committing (another run
	// finishes the turn); Error says why.
	TypeTurnFailed = "turn_failed"
	// TypeInputConsumed: an input was consumed without a turn (Cursor is
	// its sequence): refused (Error says why), or a duplicate of an input
	// taken before.
	TypeInputConsumed = "input_consumed"
)

// Event is one live event, as JSON on the wire.
type Event struct {
	V       int       `json:"v"`
	Type    string    `json:"type"`
	Session string    `json:"session"`
	Turn    string    `json:"turn,omitempty"`
	Node    string    `json:"node,omitempty"` // the run that published it
	At      time.Time `json:"at"`

	Text      string   `json:"text,omitempty"`      // text_delta
	Effect    uint64   `json:"effect,omitempty"`    // text_delta: the model call's effect id
	Message   *Message `json:"message,omitempty"`   // message
	Iteration int      `json:"iteration,omitempty"` // machine steps
	CallID    string   `json:"call_id,omitempty"`
	Name      string   `json:"name,omitempty"` // notice
	Detail    string   `json:"detail,omitempty"`

	Status      string `json:"status,omitempty"`      // turn_committed: running, waiting or done
	Termination string `json:"termination,omitempty"` // turn_committed: natural-end, suspended, ...
	Code        string `json:"code,omitempty"`        // turn_committed: why a turn failed
	// Cursor, on turn_committed: the last input the turn answered (those
	// up to it are consumed), so a client knows its message's answer is
	// complete.
	Cursor uint64 `json:"cursor,omitempty"`
	Error  string `json:"error,omitempty"` // turn_failed
}

// Message is a conversation message.
type Message struct {
	Role      string     `json:"role"` // system, user, assistant or tool
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	CallID    string     `json:"call_id,omitempty"` // the call a tool message answers
	Name      string     `json:"name,omitempty"`    // its tool
	Error     bool       `json:"error,omitempty"`
	Pending   bool       `json:"pending,omitempty"` // a placeholder for a suspended call
	// Truncated: a text or arguments were cut at MaxText bytes (the
	// transcript has them whole).
	Truncated bool `json:"truncated,omitempty"`
}

// MaxText bounds each text a live event carries, so events stay well
// under NATS's message size: a message's text and each call's arguments
// are cut there, and a longer streamed piece goes out as several deltas.
const MaxText = 32 << 10

// ToolCall is a call a model asked for.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"` // JSON text, as the model wrote it
}

// FromMessage is m as a live message, its texts cut at MaxText.
func FromMessage(m turn.Message) *Message {
	out := &Message{Role: m.Role.String(), CallID: m.CallID, Name: m.Name, Error: m.Error, Pending: m.Pending}
	out.Text = out.cut(m.Text)
	for _, c := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: out.cut(c.Arguments)})
	}
	return out
}

func (m *Message) cut(s string) string {
	s, cut := Clip(s, MaxText)
	m.Truncated = m.Truncated || cut
	return s
}

// Clip cuts s to at most n bytes, on a rune boundary, and says whether it
// cut.
func Clip(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	return s[:runeStart(s, n)], true
}

// runeStart is the largest i <= n that starts a rune of s, or n when none
// does within a rune's length (not UTF-8: cut anywhere).
func runeStart(s string, n int) int {
	for i := n; i > 0 && i > n-utf8.UTFMax && i < len(s); i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return n
}

// Deltas cuts a streamed piece into deltas of at most MaxText bytes, on
// rune boundaries: they join back into text.
func Deltas(effect uint64, text string) []Event {
	var out []Event
	for len(text) > 0 {
		n := len(text)
		if n > MaxText {
			n = runeStart(text, MaxText)
		}
		out = append(out, Event{Type: TypeTextDelta, Effect: effect, Text: text[:n]})
		text = text[n:]
	}
	return out
}

// Step is a machine event as a live event (its type with '_' for '.').
func Step(e turn.Event) Event {
	return Event{Type: strings.ReplaceAll(e.Type, ".", "_"), Iteration: e.Iteration, CallID: e.CallID, Detail: e.Detail}
}

// Notice is a hook's emitted event as a live event.
func Notice(e turn.Event) Event {
	return Event{Type: TypeNotice, Name: e.Type, Iteration: e.Iteration, CallID: e.CallID, Detail: e.Detail}
}

// Progress turns the machine's progress report into live events: its
// steps, then its messages.
func Progress(p *turn.Progress) []Event {
	out := make([]Event, 0, len(p.Events)+len(p.Messages))
	for _, e := range p.Events {
		out = append(out, Step(e))
	}
	for _, m := range p.Messages {
		out = append(out, Event{Type: TypeMessage, Message: FromMessage(m)})
	}
	return out
}
