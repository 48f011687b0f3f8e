package nodeapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/projector"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/turn"
)

// Endpoints that read a node's read model beyond a session's head.
const (
	// EndpointSessions lists sessions, for programs that serve many
	// (a gateway lists those one caller may see by their id prefix).
	EndpointSessions = "sessions"
	// EndpointTranscript reads a session's committed messages.
	EndpointTranscript = "transcript"
)

// Bounds of a sessions or transcript page.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	// MaxPageBytes bounds a page's messages, within a NATS message; a
	// message's text (or a call's arguments) past MaxMessageText is cut
	// and marked truncated.
	MaxPageBytes   = 512 << 10
	MaxMessageText = 256 << 10
)

// SessionsRequest lists sessions whose ids start with Prefix (made of
// [A-Za-z0-9_-]; empty for all), in id order, after the session After;
// or, with IDs (at most MaxPageLimit, each once, without Prefix, After
// and Limit), those of the sessions named that exist, in the order named.
type SessionsRequest struct {
	Prefix string   `json:"prefix,omitempty"`
	After  string   `json:"after,omitempty"`
	Limit  int      `json:"limit,omitempty"`
	IDs    []string `json:"ids,omitempty"`
}

func (*SessionsRequest) missing() []string { return nil }

// SessionsPage answers sessions: the heads, and the id to pass as After
// for the next page ("" at the end).
type SessionsPage struct {
	Sessions []Status `json:"sessions"`
	Next     string   `json:"next,omitempty"`
}

// TranscriptRequest reads a session's messages from index From (0: the
// first), at most Limit of them.
type TranscriptRequest struct {
	Session string `json:"session"`
	From    int    `json:"from,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

func (r *TranscriptRequest) missing() []string { return need(nil, "session", r.Session) }

// TranscriptPage answers transcript: messages in order, and Next, the
// index to ask from next when More.
type TranscriptPage struct {
	Messages []TranscriptMessage `json:"messages"`
	More     bool                `json:"more"`
	Next     int                 `json:"next"`
}

// TranscriptMessage is one committed message.
type TranscriptMessage struct {
	Index     int        `json:"index"`
	Turn      string     `json:"turn"`
	Role      string     `json:"role"`
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// CallID and Name, on a tool message: the call it answers.
	CallID  string `json:"call_id,omitempty"`
	Name    string `json:"name,omitempty"`
	Error   bool   `json:"error,omitempty"`
	Pending bool   `json:"pending,omitempty"`
	// Truncated: a text or arguments were cut at MaxMessageText bytes.
	Truncated bool `json:"truncated,omitempty"`
}

// ToolCall is a call a model asked for; Arguments is JSON text.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
}

// SuspendedCall is a call a session holds suspended: Awaiting says for
// what ("decision": a person's resume or cancel; else the wake a node
// delivers: sleep, signal, process, event), Reason is its ticket.
type SuspendedCall struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Awaiting  string `json:"awaiting"`
}

func pageLimit(limit int) (int, error) {
	switch {
	case limit < 0 || limit > MaxPageLimit:
		return 0, badRequest("limit %d: 1 to %d (0: %d)", limit, MaxPageLimit, DefaultPageLimit)
	case limit == 0:
		return DefaultPageLimit, nil
	}
	return limit, nil
}

// caughtUp waits until the projection holds what the SESSIONS stream held
// at the call.
func (s *Server) caughtUp(ctx context.Context) error {
	last, err := s.node.Streams().LastSeq(ctx, streams.Sessions)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, ProjectionWait)
	defer cancel()
	if err := s.proj.WaitFor(wctx, last); err != nil {
		return fmt.Errorf("the node's projection is behind the stream (at %d of %d): %w", s.proj.Applied(), last, err)
	}
	return nil
}

func (s *Server) sessions(ctx context.Context, data []byte) (any, error) {
	var req SessionsRequest
	if err := s.decode(data, &req, true); err != nil {
		return nil, err
	}
	limit, err := pageLimit(req.Limit)
	if err != nil {
		return nil, err
	}
	if req.Prefix != "" {
		if tok, err := streams.Token(req.Prefix); err != nil || tok != req.Prefix {
			return nil, badRequest("prefix %.64q: only [A-Za-z0-9_-], at most %d bytes", req.Prefix, streams.MaxIDBytes)
		}
	}
	if req.After != "" {
		if _, err := streams.Token(req.After); err != nil {
			return nil, badRequest("after: %v", err)
		}
	}
	if len(req.IDs) > 0 {
		return s.namedSessions(ctx, &req)
	}
	if err := s.caughtUp(ctx); err != nil {
		return nil, err
	}
	heads, next, err := s.proj.SessionsWithPrefix(req.Prefix, req.After, limit)
	if err != nil {
		return nil, err
	}
	page := &SessionsPage{Sessions: make([]Status, 0, len(heads)), Next: next}
	for i := range heads {
		page.Sessions = append(page.Sessions, *s.statusOf(&heads[i]))
	}
	return page, nil
}

// namedSessions answers sessions by ids: one wait for the projection, and
// a read of each.
func (s *Server) namedSessions(ctx context.Context, req *SessionsRequest) (any, error) {
	switch {
	case req.Prefix != "" || req.After != "" || req.Limit != 0:
		return nil, badRequest("ids: without prefix, after and limit")
	case len(req.IDs) > MaxPageLimit:
		return nil, badRequest("ids: %d, at most %d", len(req.IDs), MaxPageLimit)
	}
	seen := make(map[string]bool, len(req.IDs))
	for _, id := range req.IDs {
		if _, err := streams.Token(id); err != nil {
			return nil, badRequest("ids: %v", err)
		}
		if seen[id] {
			return nil, badRequest("ids: %.64q named twice", id)
		}
		seen[id] = true
	}
	if err := s.caughtUp(ctx); err != nil {
		return nil, err
	}
	page := &SessionsPage{Sessions: []Status{}}
	for _, id := range req.IDs {
		h, err := s.proj.Session(id)
		if errors.Is(err, projector.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		page.Sessions = append(page.Sessions, *s.statusOf(h))
	}
	return page, nil
}

func (s *Server) transcript(ctx context.Context, data []byte) (any, error) {
	var req TranscriptRequest
	if err := s.decode(data, &req, false); err != nil {
		return nil, err
	}
	limit, err := pageLimit(req.Limit)
	if err != nil {
		return nil, err
	}
	if req.From < 0 {
		return nil, badRequest("from %d: a message index, 0 or more", req.From)
	}
	if _, err := s.head(ctx, req.Session); err != nil {
		return nil, err
	}
	entries, err := s.proj.Transcript(req.Session, req.From)
	if err != nil {
		return nil, err
	}
	page := &TranscriptPage{Messages: []TranscriptMessage{}, Next: req.From}
	size := 0
	for _, e := range entries {
		m := transcriptMessage(e)
		n := len(m.Text) + 256
		for _, c := range m.ToolCalls {
			n += len(c.Arguments) + len(c.Name) + len(c.ID) + 64
		}
		if len(page.Messages) == limit || size+n > MaxPageBytes && len(page.Messages) > 0 {
			page.More = true
			break
		}
		size += n
		page.Messages = append(page.Messages, m)
		page.Next = e.Index + 1
	}
	return page, nil
}

func transcriptMessage(e projector.TranscriptEntry) TranscriptMessage {
	m := e.Message
	out := TranscriptMessage{Index: e.Index, Turn: e.Turn, Role: m.Role.String(), CallID: m.CallID, Name: m.Name,
		Error: m.Error, Pending: m.Pending}
	out.Text = out.cut(m.Text)
	for _, c := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: out.cut(c.Arguments)})
	}
	return out
}

func (m *TranscriptMessage) cut(s string) string {
	s, cut := live.Clip(s, MaxMessageText)
	m.Truncated = m.Truncated || cut
	return s
}

// statusOf is a head as the status endpoint answers it.
func (s *Server) statusOf(h *projector.SessionHead) *Status {
	st := &Status{Session: h.Session, Revision: h.Revision, Fence: h.Fence, Turns: h.Turns, LastTurn: h.LastTurn,
		InputTokens: h.Usage.InputTokens, OutputTokens: h.Usage.OutputTokens, Messages: h.Messages,
		Inputs: h.Inputs, LastInput: h.LastInput, InputCursor: h.InputCursor, Pending: h.Pending,
		Suspended: h.Suspended, Applied: s.proj.Applied(), Agent: h.Agent, Labels: h.LabelMap(),
		Created: h.Created, Active: h.Active}
	if h.Turns > 0 {
		st.RunStatus = h.Status.String()
		st.Termination = h.Termination.Reason.String()
		st.TerminationCode, st.TerminationText = h.Termination.Code, h.Termination.Detail
	}
	return st
}

// suspendedCalls are the calls h holds suspended, as its last commit left
// them.
func (s *Server) suspendedCalls(h *projector.SessionHead) ([]SuspendedCall, error) {
	calls, err := s.proj.Suspended(h)
	if err != nil || len(calls) == 0 {
		return nil, err
	}
	out := make([]SuspendedCall, 0, len(calls))
	for _, sc := range calls {
		out = append(out, suspendedCall(sc))
	}
	return out, nil
}

func suspendedCall(sc turn.SuspendedCall) SuspendedCall {
	var m TranscriptMessage
	return SuspendedCall{CallID: sc.Call.ID, Tool: sc.Call.Name, Arguments: m.cut(sc.Call.Arguments),
		Reason: m.cut(sc.Ticket.Reason), Awaiting: lash.Awaiting(sc.Call.Name, sc.Ticket.Reason)}
}
