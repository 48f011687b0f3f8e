package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lash-run/lash/live"
)

// OpenAI's Chat Completions over a session: every client library speaks
// it. The session is named by the Lash-Session header (the API itself has
// no conversation id); the model names the agent ("lash" or "default" for
// the deployment's default). The request's last message is the user's
// new message; the earlier ones are the client's copy of what the session
// holds already, and are only hashed: its key is the Idempotency-Key
// header, else a hash of the conversation the request carries, so a
// client's retry is the same input and its response replayed, and the
// same words later in the conversation are not. Tools run in lash;
// the completion carries the assistant's text. A response paused for a
// decision ends with finish_reason "stop" and lash_suspended: decide
// through /v1/sessions/{id}/decisions and send the next message.

// SessionHeader names the session of a chat completion.
const SessionHeader = "Lash-Session"

type oaRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	Stream bool `json:"stream"`
}

// writeOpenAIError answers as the OpenAI API does:
// {"error":{"message","type","code"}}.
func (g *Gateway) writeOpenAIError(w http.ResponseWriter, r *http.Request, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = g.fromNodes(err)
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lash"`)
	}
	if e.retry > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int((e.retry+time.Second-1)/time.Second)))
	}
	typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 409: "conflict_error", 413: "invalid_request_error", 429: "rate_limit_error"}[e.status]
	if typ == "" {
		typ = "api_error"
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"message": e.msg, "type": typ, "code": nil}})
}

func (g *Gateway) chatCompletions(w http.ResponseWriter, r *http.Request, c *Caller) error {
	var req oaRequest
	if err := readJSON(w, r, g.cfg.MaxChatBody, &req, false); err != nil {
		return err
	}
	session := r.Header.Get(SessionHeader)
	switch {
	case session == "":
		return fail(http.StatusBadRequest, "name the session in the %s header", SessionHeader)
	case !plainID(session):
		return fail(http.StatusBadRequest, "%s: 1 to %d of [A-Za-z0-9_-]", SessionHeader, MaxSessionID)
	case !c.Sees(session):
		return fail(http.StatusNotFound, "unknown session %q", session)
	case len(req.Messages) == 0 || req.Messages[len(req.Messages)-1].Role != "user":
		return fail(http.StatusBadRequest, "the last message must be the user's new message")
	}
	text := aguiText(req.Messages[len(req.Messages)-1].Content)
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		// The conversation as the client sends it: a retry is the same,
		// the same words later in the conversation are not.
		h := sha256.New()
		for _, m := range req.Messages {
			fmt.Fprintf(h, "%s\x00%s\x01", m.Role, aguiText(m.Content))
		}
		key = "oa-" + hex.EncodeToString(h.Sum(nil)[:16])
	} else if _, err := idempotencyKey(r); err != nil {
		return err
	}
	agent := req.Model
	if agent == "lash" || agent == "default" {
		agent = ""
	}
	// A completion holds a stream's place, streamed or not, while its
	// turn runs.
	sl, rs, done, err := g.beginResponse(r, c, session)
	if err != nil {
		return err
	}
	defer done()
	a, err := g.submit(r, c, session, key, text, agent, nil)
	if err != nil {
		return err
	}
	rs.through, rs.replay = a.Seq, a.Duplicate
	id := fmt.Sprintf("chatcmpl-%s-%d", session, a.Seq)
	created := time.Now().Unix()
	model := req.Model
	if req.Stream {
		return g.completionStream(w, r, sl, rs, id, model, created)
	}
	var answer whole
	var end live.Event
	err = g.relay(r.Context(), rs, nil, func(rec live.Record) error {
		answer.add(rec.Event)
		return nil
	}, func(ev live.Event) error {
		end = ev
		return nil
	})
	if !errors.Is(err, errAnswered) {
		if err == nil {
			err = errors.New("the response ended without its commit")
		}
		return err
	}
	msg := map[string]any{"role": "assistant", "content": answer.b.String()}
	out := map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(end), "logprobs": nil}}}
	if end.Termination == "suspended" {
		out["lash_suspended"] = true
	}
	if s := refusal(end); s != "" {
		return fail(http.StatusBadRequest, "the input was refused: %s", s)
	}
	if end.Code != "" && end.Termination == "error" {
		return fail(http.StatusBadGateway, "the turn failed: %s", end.Code)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func finishReason(ev live.Event) string {
	if ev.Termination == "stopped" {
		return "length"
	}
	return "stop"
}

// oaMapper keeps the text of a response as it streams: the pieces of each
// model call, and the whole text of one that streamed none (replayed). A
// call answered again by another run (the first died mid-answer) streams
// again from its start: a streamed completion has both, as it came.
type oaMapper struct {
	streamed bool // the current model call's text came in pieces
}

func (m *oaMapper) text(ev live.Event) string {
	switch ev.Type {
	case live.TypeTextDelta:
		m.streamed = true
		return ev.Text
	case live.TypeMessage:
		if ev.Message == nil || ev.Message.Role != "assistant" {
			return ""
		}
		if m.streamed {
			m.streamed = false
			return ""
		}
		return ev.Message.Text
	}
	return ""
}

// whole is the text of a response's assistant messages, as committed (a
// message cut for the live stream, from its pieces).
type whole struct {
	b      strings.Builder
	pieces strings.Builder // of the model call under way, from its last run
	from   string
}

func (w *whole) add(ev live.Event) {
	switch ev.Type {
	case live.TypeTextDelta:
		if from := answerOf(ev); from != w.from {
			w.pieces.Reset()
			w.from = from
		}
		w.pieces.WriteString(ev.Text)
	case live.TypeMessage:
		if ev.Message == nil || ev.Message.Role != "assistant" {
			return
		}
		if ev.Message.Truncated && w.pieces.Len() > 0 {
			w.b.WriteString(w.pieces.String())
		} else {
			w.b.WriteString(ev.Message.Text)
		}
		w.pieces.Reset()
		w.from = ""
	}
}

func (g *Gateway) completionStream(w http.ResponseWriter, r *http.Request, sl *slot, rs *response, id, model string, created int64) error {
	st := g.startStream(w, r, sl, nil)
	defer st.close()
	chunk := func(delta map[string]any, finish any) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}})
		return append(append([]byte("data: "), b...), "\n\n"...)
	}
	if st.write(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) != nil {
		return nil
	}
	var m oaMapper
	err := g.relay(st.ctx, rs, st.beat, func(rec live.Record) error {
		if s := m.text(rec.Event); s != "" {
			return st.write(chunk(map[string]any{"content": s}, nil))
		}
		return nil
	}, func(ev live.Event) error {
		if s := refusal(ev); s != "" {
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "the input was refused: " + s, "type": "invalid_request_error", "code": "input_refused"}})
			return st.write(append(append([]byte("data: "), b...), "\n\n"...))
		}
		if ev.Code != "" && ev.Termination == "error" {
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "the turn failed: " + ev.Code, "type": "api_error", "code": ev.Code}})
			return st.write(append(append([]byte("data: "), b...), "\n\n"...))
		}
		if err := st.write(chunk(map[string]any{}, finishReason(ev))); err != nil {
			return err
		}
		return st.write([]byte("data: [DONE]\n\n"))
	})
	if err != nil && !errors.Is(err, errAnswered) && st.ctx.Err() == nil {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "the stream broke off: " + err.Error(), "type": "api_error"}})
		_ = st.write(append(append([]byte("data: "), b...), "\n\n"...))
	}
	return nil
}
