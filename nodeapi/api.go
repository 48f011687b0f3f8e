package nodeapi

import (
	"fmt"
	"strings"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/streams"
)

// ServiceName is the micro service every node runs.
const ServiceName = "lash"

// Endpoint names.
const (
	EndpointSubmit = "submit"
	EndpointStatus = "status"
	EndpointDecide = "decide"
	EndpointCancel = "cancel"
	EndpointInfo   = "info"
)

// Subject is where the endpoint of a deployment with prefix listens.
func Subject(prefix, endpoint string) string { return prefix + ".api." + endpoint }

// SessionEndpoints are also served per session, on SessionSubject: the
// session is the subject's, so NATS permissions on it say who may chat
// with (submit, status, live) or decide for (decide, cancel) one session.
var SessionEndpoints = []string{EndpointSubmit, EndpointStatus, EndpointDecide, EndpointCancel, EndpointLive}

// SessionSubject is where endpoint listens for one session:
// <prefix>.api.sess.<session>.<endpoint>, the session as a subject token.
func SessionSubject(prefix, session, endpoint string) (string, error) {
	tok, err := streams.Token(session)
	if err != nil {
		return "", &Error{Endpoint: endpoint, Code: CodeBadRequest, Description: "session: " + err.Error()}
	}
	return prefix + ".api.sess." + tok + "." + endpoint, nil
}

// SubmitRequest appends an input to a session: a user message, or
// decisions for suspended tool calls and a cancel (not both). On a
// session's own subject submit takes a message only: decisions and
// cancels go to its decide and cancel endpoints, granted apart.
type SubmitRequest struct {
	Session string `json:"session"`
	// Key is the input's idempotency key within the session.
	Key       string          `json:"key"`
	Text      string          `json:"text,omitempty"`
	Decisions []lash.Decision `json:"decisions,omitempty"`
	Cancel    bool            `json:"cancel,omitempty"`
	// Agent binds the session to an agent with its message (lash.Input's
	// agent): "name", or "name@N" to pin a version.
	Agent string `json:"agent,omitempty"`
	// Labels label the session with its first message.
	Labels map[string]string `json:"labels,omitempty"`
}

func (r *SubmitRequest) missing() []string {
	m := need(nil, "session", r.Session, "key", r.Key)
	if r.Text == "" && len(r.Decisions) == 0 && !r.Cancel {
		m = append(m, "text, decisions or cancel")
	}
	return m
}

func (r *SubmitRequest) input() lash.Input {
	return lash.Input{Text: r.Text, Decisions: r.Decisions, Cancel: r.Cancel, Agent: r.Agent, Labels: r.Labels}
}

// Accepted answers submit, decide and cancel: the input's sequence on the
// SESSIONS stream, and whether an input with the same key was there
// already.
type Accepted struct {
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// StatusRequest asks for a session's head.
type StatusRequest struct {
	Session string `json:"session"`
}

func (r *StatusRequest) missing() []string { return need(nil, "session", r.Session) }

// Status is a session's head as the answering node's projection holds it.
type Status struct {
	Session string `json:"session"`
	// Revision is the session log's head revision; Fence the fencing token
	// of the holder that fenced last.
	Revision uint64 `json:"revision"`
	Fence    uint64 `json:"fence"`
	// Turns counts committed turns; the last one's id and outcome follow.
	Turns    int    `json:"turns"`
	LastTurn string `json:"last_turn,omitempty"`
	// RunStatus is running, waiting or done ("" before the first turn).
	RunStatus string `json:"run_status,omitempty"`
	// Termination is why the last turn ended (natural-end, suspended, ...).
	Termination     string `json:"termination,omitempty"`
	TerminationCode string `json:"termination_code,omitempty"`
	TerminationText string `json:"termination_detail,omitempty"`
	InputTokens     int64  `json:"input_tokens"`
	OutputTokens    int64  `json:"output_tokens"`
	Messages        int    `json:"messages"`
	// Inputs counts inputs appended; InputCursor is the last one a turn
	// consumed; Pending lists the sequences of those still waiting.
	Inputs      int      `json:"inputs"`
	LastInput   uint64   `json:"last_input"`
	InputCursor uint64   `json:"input_cursor"`
	Pending     []uint64 `json:"pending,omitempty"`
	// Suspended counts tool calls waiting for a decision.
	Suspended int `json:"suspended"`
	// Agent is the agent the session runs (none: the default agent);
	// Labels those its first message gave it.
	Agent  string            `json:"agent,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Created and Active are when the session's first and latest message
	// were stored.
	Created time.Time `json:"created"`
	Active  time.Time `json:"active"`
	// SuspendedCalls are the calls counted by Suspended (status only).
	SuspendedCalls []SuspendedCall `json:"suspended_calls,omitempty"`
	// Applied is the SESSIONS sequence the projection had folded when it
	// answered: at least the stream's last sequence at the request.
	Applied uint64 `json:"applied"`
}

// DecideRequest resumes or cancels a suspended tool call. Key is the
// decision's idempotency key and its id.
type DecideRequest struct {
	Session string `json:"session"`
	Key     string `json:"key"`
	CallID  string `json:"call_id"`
	// Action is "resume" or "cancel".
	Action string `json:"action"`
	// Mode, for resume: "replay" (the default), "use-result" or
	// "pass-to-tool"; see lash.Decision.
	Mode    string `json:"mode,omitempty"`
	Payload string `json:"payload,omitempty"`
}

func (r *DecideRequest) missing() []string {
	return need(nil, "session", r.Session, "key", r.Key, "call_id", r.CallID, "action", r.Action)
}

func (r *DecideRequest) decision() lash.Decision {
	return lash.Decision{ID: r.Key, CallID: r.CallID, Action: r.Action, Mode: r.Mode, Payload: r.Payload}
}

// CancelRequest asks a session's running turn to stop at its next safe
// boundary.
type CancelRequest struct {
	Session string `json:"session"`
	Key     string `json:"key"`
	// Turn, if set, is the turn to stop ("in-<seq>", lash.Input's turn):
	// once that turn has committed, the cancel changes nothing.
	Turn string `json:"turn,omitempty"`
}

func (r *CancelRequest) missing() []string { return need(nil, "session", r.Session, "key", r.Key) }

// InfoRequest asks a node about itself. Its body may be empty.
type InfoRequest struct{}

func (*InfoRequest) missing() []string { return nil }

// Info is a node about itself.
type Info struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	Version     string `json:"version"`
	Prefix      string `json:"prefix"`
	// Started is when the API server started; Uptime how long ago, in
	// seconds.
	Started time.Time `json:"started"`
	Uptime  float64   `json:"uptime_seconds"`
	// Running counts the sessions whose lease this node holds.
	Running int `json:"sessions_running"`
	// Applied is the last SESSIONS sequence the node's projection folded.
	Applied uint64 `json:"projection_applied"`
	// Tools are the tools the node offers its turns now: built-ins, those
	// served over NATS and by MCP servers, those of Go code linked in.
	Tools []string `json:"tools,omitempty"`
	// Refused lists the newest requests the node refused (at most
	// MaxRefusals), oldest first: a request/reply message is stored
	// nowhere, so this is where an operator sees it.
	Refused []Refusal `json:"refused,omitempty"`
}

// MaxRefusals is how many refused requests a node keeps in memory.
const MaxRefusals = 64

// Refusal is one refused request.
type Refusal struct {
	At       time.Time `json:"at"`
	Endpoint string    `json:"endpoint"`
	Code     int       `json:"code"`
	Reason   string    `json:"reason"`
	// Data is the request's start, at most 1 KiB.
	Data []byte `json:"data"`
}

// UptimeDuration is Uptime as a duration.
func (i *Info) UptimeDuration() time.Duration { return time.Duration(i.Uptime * float64(time.Second)) }

// need appends the names whose values are empty to m; pairs are name,
// value.
func need(m []string, pairs ...string) []string {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			m = append(m, pairs[i])
		}
	}
	return m
}

// Error codes.
const (
	CodeBadRequest = 400
	CodeNotFound   = 404
	CodeBusy       = 409
	CodeTooLarge   = 413
	CodeInternal   = 500
)

// Error is a request the node refused or failed, as the client sees it.
type Error struct {
	Endpoint    string
	Code        int
	Description string
}

func (e *Error) Error() string {
	s := "nodeapi"
	if e.Endpoint != "" {
		s += ": " + e.Endpoint
	}
	s += fmt.Sprintf(": %d", e.Code)
	if e.Description != "" {
		s += " " + e.Description
	}
	return s
}

// Is matches an Error against the sentinels by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Endpoint == "" && t.Description == "" && t.Code == e.Code
}

// Sentinels for errors.Is, by code.
var (
	ErrBadRequest = &Error{Code: CodeBadRequest}
	ErrNotFound   = &Error{Code: CodeNotFound}
	ErrBusy       = &Error{Code: CodeBusy}
	ErrTooLarge   = &Error{Code: CodeTooLarge}
	ErrInternal   = &Error{Code: CodeInternal}
)

// oneLine keeps a description to one line.
func oneLine(s string) string {
	s = strings.TrimSpace(strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s))
	if s == "" {
		return "error"
	}
	return s
}
