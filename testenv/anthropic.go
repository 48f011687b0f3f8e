package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/turn"
)

// The ModelServer speaks Anthropic's Messages API too (POST /v1/messages,
// JSON or server-sent events with "stream": true), from the same script:
// AnthropicURL is the base URL provider/anthropic wants. A request is read
// back into the turn.ModelRequest the script sees as the OpenAI one is:
// the system prompt first, tool results as tool messages named after their
// call, a failed result's text as "error: <text>", late results undone.

// AnthropicURL returns the base URL of the Messages API (without /v1).
func (s *ModelServer) AnthropicURL() string { return s.srv.URL }

func (s *ModelServer) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	rec := RequestRecord{Time: time.Now(), Body: body}
	if err != nil {
		return
	}
	var ar anthropicRequest
	req, err := ar.read(body)
	if err != nil {
		s.reject(w, rec, "", err.Error(), writeAnthropicError)
		return
	}
	rec.Hash, rec.Stream, rec.Request = canonicalHash(body), ar.Stream, req
	reply, pace, ok := s.reply(w, r, rec, writeAnthropicError)
	if !ok {
		return
	}
	id := "msg_" + rec.Hash[:16]
	if ar.Stream {
		writeAnthropicStream(w, id, req.Model, reply.Response, pace)
		return
	}
	writeJSON(w, http.StatusOK, anthropicAnswerOf(id, req.Model, reply.Response))
}

type anthropicRequest struct {
	Model         string             `json:"model"`
	MaxTokens     int                `json:"max_tokens"`
	System        []anthropicBlock   `json:"system"`
	Messages      []anthropicMessage `json:"messages"`
	Tools         []anthropicTool    `json:"tools"`
	StopSequences []string           `json:"stop_sequences"`
	Temperature   *float64           `json:"temperature"`
	TopP          *float64           `json:"top_p"`
	Stream        bool               `json:"stream"`
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content []anthropicBlock `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// read decodes a request body into the request lash sent.
func (ar *anthropicRequest) read(body []byte) (turn.ModelRequest, error) {
	if err := json.Unmarshal(body, ar); err != nil {
		return turn.ModelRequest{}, fmt.Errorf("the body is not a messages request: %v", err)
	}
	if ar.MaxTokens <= 0 {
		return turn.ModelRequest{}, fmt.Errorf("max_tokens: field required")
	}
	req := turn.ModelRequest{Model: ar.Model}
	for _, b := range ar.System {
		req.Messages = append(req.Messages, turn.Message{Role: turn.RoleSystem, Text: b.Text})
	}
	names := map[string]string{}
	for i, am := range ar.Messages {
		var text strings.Builder
		var calls []turn.ToolCall
		for _, b := range am.Content {
			switch b.Type {
			case "text":
				if am.Role == "user" {
					m := turn.Message{Role: turn.RoleUser, Text: b.Text}
					if id, name, result, ok := provider.ParseLateResult(b.Text); ok {
						m = turn.Message{Role: turn.RoleTool, CallID: id, Name: name, Text: result}
					}
					req.Messages = append(req.Messages, m)
					continue
				}
				text.WriteString(b.Text)
			case "tool_use":
				var compact bytes.Buffer
				if err := json.Compact(&compact, b.Input); err != nil {
					return req, fmt.Errorf("message %d: tool_use input: %v", i, err)
				}
				calls = append(calls, turn.ToolCall{ID: b.ID, Name: b.Name, Arguments: compact.String()})
				names[b.ID] = b.Name
			case "tool_result":
				var parts []anthropicBlock
				var s string
				if json.Unmarshal(b.Content, &s) != nil {
					if err := json.Unmarshal(b.Content, &parts); err != nil {
						return req, fmt.Errorf("message %d: tool_result content: %v", i, err)
					}
					for _, p := range parts {
						s += p.Text
					}
				}
				if b.IsError {
					s = "error: " + s
				}
				req.Messages = append(req.Messages, turn.Message{Role: turn.RoleTool, CallID: b.ToolUseID, Name: names[b.ToolUseID], Text: s})
			default:
				return req, fmt.Errorf("message %d: block type %q", i, b.Type)
			}
		}
		switch am.Role {
		case "assistant":
			req.Messages = append(req.Messages, turn.Message{Role: turn.RoleAssistant, Text: text.String(), ToolCalls: calls})
		case "system":
			req.Messages = append(req.Messages, turn.Message{Role: turn.RoleSystem, Text: text.String()})
		case "user":
		default:
			return req, fmt.Errorf("message %d: unknown role %q", i, am.Role)
		}
	}
	for _, t := range ar.Tools {
		spec := turn.ToolSpec{Name: t.Name, Description: t.Description}
		if len(t.InputSchema) > 0 {
			var b bytes.Buffer
			if err := json.Compact(&b, t.InputSchema); err != nil {
				return req, fmt.Errorf("tool %s: %v", t.Name, err)
			}
			spec.Schema = b.String()
		}
		req.Tools = append(req.Tools, spec)
	}
	req.Sampling = turn.Sampling{Temperature: ar.Temperature, TopP: ar.TopP, MaxTokens: ar.MaxTokens, Stop: ar.StopSequences}
	return req, nil
}

type anthropicUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

type anthropicAnswer struct {
	ID         string           `json:"id"`
	Type       string           `json:"type"`
	Role       string           `json:"role"`
	Model      string           `json:"model"`
	Content    []anthropicBlock `json:"content"`
	StopReason *string          `json:"stop_reason"`
	Usage      anthropicUsage   `json:"usage"`
}

func stopReason(f turn.FinishReason) string {
	switch f {
	case turn.FinishToolCalls:
		return "tool_use"
	case turn.FinishLength:
		return "max_tokens"
	case turn.FinishContentFilter:
		return "refusal"
	}
	return "end_turn"
}

func anthropicAnswerOf(id, model string, resp turn.ModelResponse) anthropicAnswer {
	stop := stopReason(resp.Finish)
	a := anthropicAnswer{ID: id, Type: "message", Role: "assistant", Model: model, StopReason: &stop,
		Usage: anthropicUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}}
	if resp.Text != "" {
		a.Content = append(a.Content, anthropicBlock{Type: "text", Text: resp.Text})
	}
	for _, c := range resp.ToolCalls {
		a.Content = append(a.Content, anthropicBlock{Type: "tool_use", ID: c.ID, Name: c.Name, Input: json.RawMessage(c.Arguments)})
	}
	if a.Content == nil {
		a.Content = []anthropicBlock{}
	}
	return a
}

// writeAnthropicStream sends the answer as the Messages API streams it:
// message_start, a text block whose deltas are scripted.Chunks (pace waits
// between them; false ends the stream there), a tool_use block per call
// with its input in two input_json_delta pieces, message_delta with the
// stop reason and usage, message_stop.
func writeAnthropicStream(w http.ResponseWriter, id, model string, resp turn.ModelResponse, pace func() bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(typ string, v map[string]any) {
		v["type"] = typ
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	start := anthropicAnswerOf(id, model, turn.ModelResponse{})
	start.StopReason = nil
	start.Usage = anthropicUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: 1}
	send("message_start", map[string]any{"message": start})
	index := 0
	if resp.Text != "" {
		send("content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": "text", "text": ""}})
		for i, piece := range scripted.Chunks(resp.Text) {
			if i > 0 && !pace() {
				return
			}
			send("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "text_delta", "text": piece}})
		}
		send("content_block_stop", map[string]any{"index": index})
		index++
	}
	for _, c := range resp.ToolCalls {
		send("content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}})
		half := len(c.Arguments) / 2
		for _, part := range []string{c.Arguments[:half], c.Arguments[half:]} {
			send("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
		}
		send("content_block_stop", map[string]any{"index": index})
		index++
	}
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stopReason(resp.Finish), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": resp.Usage.OutputTokens}})
	send("message_stop", map[string]any{})
}

// writeAnthropicError answers with the API's error body,
// {"type": "error", "error": {"type", "message"}}; code, when given, is
// the error's type. A 429 says Retry-After: 1, as the API does.
func writeAnthropicError(w http.ResponseWriter, status int, code, msg string) {
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	typ := code
	if typ == "" || typ == provider.CodeInvalidRequest {
		switch {
		case status == http.StatusTooManyRequests:
			typ = "rate_limit_error"
		case status == http.StatusUnauthorized:
			typ = "authentication_error"
		case status == 529:
			typ = "overloaded_error"
		case status >= 500:
			typ = "api_error"
		default:
			typ = "invalid_request_error"
		}
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}
