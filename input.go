package lash

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lash-run/lash/turn"
)

// ErrBadInput: an input cannot be read or makes no sense.
var ErrBadInput = errors.New("lash: bad input")

// MaxInputBytes caps one input message.
const MaxInputBytes = 256 << 10

// Input is what clients append to a session: a user message, decisions for
// suspended tool calls, or both. On the wire it is JSON, so any language can
// publish it.
type Input struct {
	Text      string     `json:"text,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	// Cancel ends the running turn at its next safe boundary (a
	// checkpoint or a wait), cancelling its calls; with no turn running,
	// the turn it starts ends cancelled at once.
	Cancel bool `json:"cancel,omitempty"`
}

// Decision resumes or cancels one suspended tool call.
type Decision struct {
	ID     string `json:"id"`
	CallID string `json:"call_id"`
	// Action is "resume" or "cancel".
	Action string `json:"action"`
	// Mode, for resume: "replay" (run the call again), "use-result" (take
	// Payload as its result) or "pass-to-tool" (run it with Payload).
	Mode    string `json:"mode,omitempty"`
	Payload string `json:"payload,omitempty"`
}

func parseInput(data []byte) (Input, error) {
	var in Input
	if len(data) > MaxInputBytes {
		return in, fmt.Errorf("%w: %d bytes, at most %d", ErrBadInput, len(data), MaxInputBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	if in.Text == "" && len(in.Decisions) == 0 && !in.Cancel {
		return in, fmt.Errorf("%w: no text, decisions or cancel", ErrBadInput)
	}
	for _, d := range in.Decisions {
		if _, err := d.toTurn(); err != nil {
			return in, err
		}
	}
	return in, nil
}

func (d Decision) toTurn() (turn.Decision, error) {
	td := turn.Decision{ID: d.ID, CallID: d.CallID, Payload: d.Payload}
	switch d.Action {
	case "cancel":
		td.Action = turn.CancelCall
	case "resume":
		td.Action = turn.Resume
		switch d.Mode {
		case "", "replay":
			td.Mode = turn.ResumeReplay
		case "use-result":
			td.Mode = turn.ResumeUseResult
		case "pass-to-tool":
			td.Mode = turn.ResumePassToTool
		default:
			return td, fmt.Errorf("%w: decision %q: unknown mode %q", ErrBadInput, d.ID, d.Mode)
		}
	default:
		return td, fmt.Errorf("%w: decision %q: action must be resume or cancel, not %q", ErrBadInput, d.ID, d.Action)
	}
	if d.ID == "" || d.CallID == "" {
		return td, fmt.Errorf("%w: a decision needs an id and a call_id", ErrBadInput)
	}
	return td, nil
}

// toTurn is the input as the machine takes it.
func (in Input) toTurn() turn.Input {
	var t turn.Input
	if in.Text != "" {
		t.Messages = []turn.Message{{Role: turn.RoleUser, Text: in.Text}}
	}
	for _, d := range in.Decisions {
		td, _ := d.toTurn() // checked by parseInput
		t.Decisions = append(t.Decisions, td)
	}
	return t
}
