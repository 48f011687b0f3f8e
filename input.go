package lash

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/lash-run/lash/agents"
	"github.com/lash-run/lash/sessionlog"
	"github.com/lash-run/lash/streams"

	"github.com/lash-run/lash/turn"
)

// ErrBadInput: an input cannot be read or makes no sense.
var ErrBadInput = errors.New("lash: bad input")

// Input is what clients append to a session: a user message on the
// session's input subject, or decisions for suspended tool calls and
// cancels on its decision subject (never both in one input, so the right
// to chat and the right to approve are granted apart). On the wire it is
// JSON, so any language can publish it.
type Input struct {
	Text string `json:"text,omitempty"`
	// Notice is a node's word to the session's model, not the user's:
	// what woke the session (a process it started ended). The model reads
	// it as a system message. On a deployment that signs, only inputs it
	// signed may carry one (Session.Send signs them, with their key); any
	// other is refused. On one that does not, whoever may write inputs
	// may write notices.
	Notice    string     `json:"notice,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	// Cancel ends the running turn at its next safe boundary (a
	// checkpoint or a wait), cancelling its calls; with no turn running,
	// the turn it starts ends cancelled at once.
	Cancel bool `json:"cancel,omitempty"`
	// Turn names the turn a cancel stops ("in-<seq>": the turn that
	// takes input <seq>), so a stop that comes late changes nothing: once
	// that input was answered by a committed turn, the cancel is refused
	// as stale instead of stopping the next one. Without it a cancel
	// stops whatever runs.
	Turn string `json:"turn,omitempty"`
	// Agent binds the session to an agent, with its message: "name" runs
	// each turn under the agent's current version, "name@N" (or
	// "name@<version prefix>") pins it to one. Given on the first message
	// (or any later one of the same agent, to pin or unpin); a session
	// that names none runs the deployment's default agent, and keeps the
	// agent it started with.
	Agent string `json:"agent,omitempty"`
	// Labels tag the session for listing and filtering (lash-admin
	// sessions ls --label), given with its first message: at most
	// MaxSessionLabels, the rules of agents.CheckLabels.
	Labels map[string]string `json:"labels,omitempty"`
}

// MaxSessionLabels bounds a session's labels.
const MaxSessionLabels = 16

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

// Decides reports whether the input goes on the session's decision
// subject: it holds decisions or a cancel.
func (in Input) Decides() bool { return len(in.Decisions) > 0 || in.Cancel }

// parseInput reads an input that came on the decision subject (decision)
// or the input subject.
func parseInput(data []byte, decision bool) (Input, error) {
	var in Input
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return in, fmt.Errorf("%w: more data after the input object", ErrBadInput)
	}
	if in.Text == "" && in.Notice == "" && len(in.Decisions) == 0 && !in.Cancel {
		return in, fmt.Errorf("%w: no text, decisions or cancel", ErrBadInput)
	}
	if in.Notice != "" && (in.Text != "" || in.Decides()) {
		return in, fmt.Errorf("%w: a notice comes alone", ErrBadInput)
	}
	if in.Turn != "" {
		if !in.Cancel {
			return in, fmt.Errorf("%w: a turn is named by a cancel", ErrBadInput)
		}
		if _, ok := TurnInput(in.Turn); !ok {
			return in, fmt.Errorf("%w: turn %.64q: want in-<input sequence>", ErrBadInput, in.Turn)
		}
	}
	if len(in.Labels) > 0 {
		if in.Text == "" {
			return in, fmt.Errorf("%w: labels are given with a message", ErrBadInput)
		}
		if err := agents.CheckLabels(in.Labels, MaxSessionLabels); err != nil {
			return in, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
	}
	if in.Agent != "" {
		if in.Text == "" {
			return in, fmt.Errorf("%w: an agent is named with a message", ErrBadInput)
		}
		if _, err := agents.CheckRef(in.Agent); err != nil {
			return in, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
	}
	switch {
	case decision && in.Text != "":
		return in, fmt.Errorf("%w: text on the decision subject: a message goes on the session's input subject", ErrBadInput)
	case !decision && in.Decides():
		return in, fmt.Errorf("%w: decisions and cancels go on the session's decision subject (<prefix>.sess.<session>.decide), not its input subject", ErrBadInput)
	}
	for _, d := range in.Decisions {
		if _, err := d.toTurn(); err != nil {
			return in, err
		}
	}
	return in, nil
}

// screen decides what an input is: one a turn takes (take), or one
// consumed without being taken, because its key was used before (a
// duplicate, or other content under the same key: refused) or it cannot be
// read. At the start of a turn, decisions that name no suspended call are
// refused too; at a checkpoint the machine passes over them. taken are the
// inputs the turn took so far.
func screen(st *state, taken []sessionlog.InputUse, in sessionlog.Input, start bool, vouched func(sessionlog.Input) bool) (use sessionlog.InputUse, parsed Input, take bool) {
	use = sessionlog.InputUse{Seq: in.Seq, Key: in.MsgID, Hash: sha256.Sum256(in.Data), Decision: in.Decision}
	refuse := func(format string, args ...any) (sessionlog.InputUse, Input, bool) {
		use.Refused = fmt.Sprintf(format, args...)
		return use, Input{}, false
	}
	if err := streams.CheckID(use.Key); use.Key != "" && err != nil {
		use.Key = ""
		return refuse("idempotency key of %d bytes: at most %d", len(in.MsgID), streams.MaxIDBytes)
	}
	if use.Key != "" {
		prev, ok := st.keys[use.Key]
		for _, t := range taken {
			if !ok && t.Key == use.Key && t.Refused == "" && t.Duplicate == 0 {
				prev, ok = keyUse{seq: t.Seq, hash: t.Hash}, true
			}
		}
		switch {
		case ok && prev.hash == use.Hash:
			use.Duplicate = prev.seq
			return use, Input{}, false
		case ok:
			return refuse("idempotency key %q was used by input %d for other content", use.Key, prev.seq)
		}
	}
	parsed, err := parseInput(in.Data, in.Decision)
	if err != nil {
		return refuse("%v", err)
	}
	if parsed.Notice != "" && !vouched(in) {
		return refuse("%v: a notice the deployment did not sign: notices come from nodes", ErrBadInput)
	}
	if len(parsed.Labels) > 0 && (!start || st.turns > 0) {
		return refuse("%v: session %s has begun: labels are given with its first message", ErrBadInput, st.id)
	}
	if target, ok := TurnInput(parsed.Turn); ok {
		// The turn that takes the named input took it before the cancel
		// (inputs are taken in order): a cancel applies only there, so a
		// stop never starts a turn of its own or stops another.
		switch {
		case target <= st.cursor:
			return refuse("stale stop: turn %s ended before it came (inputs through %d were answered)", parsed.Turn, st.cursor)
		case !slices.ContainsFunc(taken, func(u sessionlog.InputUse) bool { return u.Seq == target }):
			return refuse("%v: the cancel names turn %s, but input %d is no input of this session before it", ErrBadInput, parsed.Turn, target)
		}
	}
	if start && parsed.Text == "" && parsed.Notice == "" && !parsed.Cancel {
		if err := decisionsMatch(st.id, parsed.Decisions, st.suspended); err != nil {
			return refuse("%v", err)
		}
	}
	return use, parsed, true
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
	if in.Notice != "" {
		t.Messages = []turn.Message{{Role: turn.RoleSystem, Text: in.Notice}}
	}
	for _, d := range in.Decisions {
		td, _ := d.toTurn() // checked by parseInput
		t.Decisions = append(t.Decisions, td)
	}
	return t
}

// decisionsMatch refuses an input of decisions only, none of which names a
// call the session holds suspended: it would start a turn with nothing to do.
func decisionsMatch(session string, ds []Decision, suspended []turn.SuspendedCall) error {
	var calls []string
	for _, d := range ds {
		for _, c := range suspended {
			if c.Call.ID == d.CallID {
				return nil
			}
		}
		calls = append(calls, d.CallID)
	}
	return fmt.Errorf("%w: session %s holds none of the calls %q suspended (decided already, or never suspended)", ErrBadInput, session, calls)
}

// vouched reports whether an input carries the deployment's signature.
func (n *Node) vouched(in sessionlog.Input) bool {
	return n.client.Vouched(&streams.Msg{Subject: in.Subject, Seq: in.Seq, Header: in.Header, Data: in.Data})
}

// TurnInput reads a turn's name, "in-<seq>", as the input sequence that
// names it.
func TurnInput(id string) (uint64, bool) {
	s, ok := strings.CutPrefix(id, "in-")
	if !ok || s == "" || len(s) > 20 || s[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}
