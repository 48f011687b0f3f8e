package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/nodeapi"
)

// The REST endpoints under /v1/sessions.

func (g *Gateway) listSessions(w http.ResponseWriter, r *http.Request, c *Caller) error {
	q := r.URL.Query()
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > nodeapi.MaxPageLimit {
			return fail(http.StatusBadRequest, "limit: 1 to %d", nodeapi.MaxPageLimit)
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && !plainID(after) {
		return fail(http.StatusBadRequest, "after: a session id")
	}
	ctx, cancel := g.requestCtx(r)
	defer cancel()
	out := &nodeapi.SessionsPage{Sessions: []nodeapi.Status{}}
	if c.SessionPrefix != "" {
		page, err := g.api.Sessions(ctx, nodeapi.SessionsRequest{Prefix: c.SessionPrefix, After: after, Limit: limit})
		if err != nil {
			return err
		}
		out = page
	}
	// Sessions the token names one by one come with the first page, read
	// in one request.
	var named []string
	for _, id := range c.Sessions {
		if (c.SessionPrefix == "" || !strings.HasPrefix(id, c.SessionPrefix)) && !slices.Contains(named, id) {
			named = append(named, id)
		}
	}
	if after == "" && len(named) > 0 {
		page, err := g.api.Sessions(ctx, nodeapi.SessionsRequest{IDs: named})
		if err != nil {
			return err
		}
		out.Sessions = append(out.Sessions, page.Sessions...)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// CreateRequest starts a session with its first message.
type CreateRequest struct {
	// ID is the session's id; without one the gateway makes one under the
	// token's session_prefix, from the Idempotency-Key (so a retry names
	// the same session).
	ID     string            `json:"id,omitempty"`
	Text   string            `json:"text"`
	Agent  string            `json:"agent,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Accepted answers an input: its session, its sequence on the SESSIONS
// stream, whether the key was used before for the same content, and the
// turn that answers it unless another turn running takes it first.
type Accepted struct {
	Session   string `json:"session"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

func (g *Gateway) createSession(w http.ResponseWriter, r *http.Request, c *Caller) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req CreateRequest
	if err := readJSON(w, r, g.cfg.MaxBody, &req, true); err != nil {
		return err
	}
	if req.ID == "" {
		if c.SessionPrefix == "" {
			return fail(http.StatusBadRequest, "give the session an id: the token has no session_prefix to make one under")
		}
		sum := sha256.Sum256([]byte(c.Subject + "\x00" + key))
		req.ID = c.SessionPrefix + hex.EncodeToString(sum[:13])
		if len(req.ID) > MaxSessionID {
			return fail(http.StatusBadRequest, "session_prefix too long to make ids under")
		}
	}
	if !plainID(req.ID) || !c.Sees(req.ID) {
		return fail(http.StatusForbidden, "the token does not grant session %q", req.ID)
	}
	a, err := g.submit(r, c, req.ID, key, req.Text, req.Agent, req.Labels)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, a)
	return nil
}

func (g *Gateway) submit(r *http.Request, c *Caller, session, key, text, agent string, labels map[string]string) (*Accepted, error) {
	if text == "" {
		return nil, fail(http.StatusBadRequest, "text: the message, required")
	}
	if !c.MayUse(agent) {
		return nil, fail(http.StatusForbidden, "the token does not grant agent %q", agent)
	}
	ctx, cancel := g.requestCtx(r)
	defer cancel()
	a, err := g.api.Submit(ctx, nodeapi.SubmitRequest{Session: session, Key: key, Text: text, Agent: agent, Labels: labels})
	if err != nil {
		return nil, err
	}
	return &Accepted{Session: session, Seq: a.Seq, Duplicate: a.Duplicate}, nil
}

func (g *Gateway) status(w http.ResponseWriter, r *http.Request, c *Caller, id string) error {
	ctx, cancel := g.requestCtx(r)
	defer cancel()
	st, err := g.api.Status(ctx, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (g *Gateway) transcript(w http.ResponseWriter, r *http.Request, c *Caller, id string) error {
	q := r.URL.Query()
	req := nodeapi.TranscriptRequest{Session: id}
	for name, p := range map[string]*int{"from": &req.From, "limit": &req.Limit} {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fail(http.StatusBadRequest, "%s: a number, 0 or more", name)
			}
			*p = n
		}
	}
	ctx, cancel := g.requestCtx(r)
	defer cancel()
	page, err := g.api.Transcript(ctx, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// MessageRequest is a message for a session.
type MessageRequest struct {
	Text  string `json:"text"`
	Agent string `json:"agent,omitempty"`
}

func (g *Gateway) sendMessage(w http.ResponseWriter, r *http.Request, c *Caller, id string) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req MessageRequest
	if err := readJSON(w, r, g.cfg.MaxBody, &req, true); err != nil {
		return err
	}
	a, err := g.submit(r, c, id, key, req.Text, req.Agent, nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, a)
	return nil
}

// DecisionRequest resumes or cancels a suspended call (lash.Decision).
type DecisionRequest struct {
	CallID  string `json:"call_id"`
	Action  string `json:"action"`
	Mode    string `json:"mode,omitempty"`
	Payload string `json:"payload,omitempty"`
}

func (g *Gateway) decide(w http.ResponseWriter, r *http.Request, c *Caller, id string) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req DecisionRequest
	if err := readJSON(w, r, g.cfg.MaxBody, &req, true); err != nil {
		return err
	}
	a, err := g.decision(r, c, id, key, lash.Decision{CallID: req.CallID, Action: req.Action, Mode: req.Mode, Payload: req.Payload})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, a)
	return nil
}

func (g *Gateway) decision(r *http.Request, c *Caller, session, key string, d lash.Decision) (*Accepted, error) {
	if !c.Decide {
		return nil, fail(http.StatusForbidden, "the token does not grant decisions")
	}
	if d.CallID == "" || d.Action == "" {
		return nil, fail(http.StatusBadRequest, "call_id and action (resume or cancel) are required")
	}
	ctx, cancel := g.requestCtx(r)
	defer cancel()
	a, err := g.api.Decide(ctx, nodeapi.DecideRequest{Session: session, Key: key, CallID: d.CallID, Action: d.Action, Mode: d.Mode, Payload: d.Payload})
	if err != nil {
		return nil, err
	}
	return &Accepted{Session: session, Seq: a.Seq, Duplicate: a.Duplicate}, nil
}

// StopRequest stops one turn: "turn" as the events name it ("in-<seq>"),
// or "input", the sequence of a message, for the turn that answers it.
type StopRequest struct {
	Turn  string `json:"turn,omitempty"`
	Input uint64 `json:"input,omitempty"`
}

func (g *Gateway) stop(w http.ResponseWriter, r *http.Request, c *Caller, id string) error {
	var req StopRequest
	if err := readJSON(w, r, g.cfg.MaxBody, &req, true); err != nil {
		return err
	}
	turnID := req.Turn
	switch {
	case turnID != "" && req.Input != 0:
		return fail(http.StatusBadRequest, "give turn or input, not both")
	case req.Input != 0:
		turnID = fmt.Sprintf("in-%d", req.Input)
	case turnID == "":
		return fail(http.StatusBadRequest, "name the turn to stop (turn, or input)")
	}
	if _, ok := lash.TurnInput(turnID); !ok {
		return fail(http.StatusBadRequest, "turn %.64q: want in-<input sequence>", turnID)
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		key = "stop-" + turnID // one stop per turn is all a turn needs
	} else if _, err := idempotencyKey(r); err != nil {
		return err
	}
	ctx, cancel := g.requestCtx(r)
	defer cancel()
	a, err := g.api.Stop(ctx, id, key, turnID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, Accepted{Session: id, Seq: a.Seq, Duplicate: a.Duplicate})
	return nil
}

// events streams the session's live events in lash's own schema, each
// with its LIVE sequence as the SSE id: resume with Last-Event-ID, or
// ?from=<seq>, or ?from=now for only what comes next (default: every event
// the stream keeps).
func (g *Gateway) events(w http.ResponseWriter, r *http.Request, c *Caller, id string) error {
	after, err := g.cursor(r)
	if err != nil {
		return err
	}
	st, err := g.openEventStream(w, r, c, nil)
	if err != nil {
		return err
	}
	defer st.close()
	frame := func(format string, args ...any) error { return st.write(fmt.Appendf(nil, format, args...)) }
	if err := frame("retry: 1000\nevent: open\nid: %d\ndata: {\"after\":%d}\n\n", after, after); err != nil || st.flush() != nil {
		return nil
	}
	ctx := st.ctx
	for {
		err := g.hub.follow(ctx, id, after, func(rec live.Record) error {
			b, err := json.Marshal(rec.Event)
			if err != nil {
				return err
			}
			after = rec.Seq
			return frame("id: %d\ndata: %s\n\n", rec.Seq, b)
		}, st.beat)
		var behind *live.BehindError
		switch {
		case st.drained():
			_ = frame("event: reconnect\ndata: {\"after\":%d,\"reason\":\"the gateway is shutting down\"}\n\n", after)
		case ctx.Err() != nil:
		case errors.As(err, &behind):
			b, _ := json.Marshal(map[string]uint64{"after": behind.After, "first": behind.First, "last": behind.Last})
			if frame("event: behind\ndata: %s\n\n", b) != nil {
				return nil
			}
			after = 0
			if behind.First > 0 {
				after = behind.First - 1
			}
			continue
		default:
			// The reader reconnects after the last event it saw.
			msg := "the event stream ended"
			if err != nil {
				msg = err.Error()
			}
			b, _ := json.Marshal(map[string]any{"after": after, "error": msg})
			_ = frame("event: reconnect\ndata: %s\n\n", b)
		}
		return nil
	}
}

// cursor is where an events stream starts.
func (g *Gateway) cursor(r *http.Request) (uint64, error) {
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = r.URL.Query().Get("from")
	}
	switch from {
	case "":
		return 0, nil
	case "now":
		return g.hub.position(r.Context())
	}
	n, err := strconv.ParseUint(from, 10, 64)
	if err != nil {
		return 0, fail(http.StatusBadRequest, "cursor %.32q: a sequence, or \"now\"", from)
	}
	return n, nil
}
