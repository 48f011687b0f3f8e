package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/turn"
)

// ModelServer is a real HTTP server on 127.0.0.1 that speaks the OpenAI
// Chat Completions API (POST /v1/chat/completions, JSON or server-sent
// events with "stream": true) and answers from a scripted.Script. It counts
// every request by the hash of its content. Its methods are safe for
// concurrent use.
//
// The server reads a request back into the turn.ModelRequest the script
// sees. It undoes the late-result mapping of provider/openai (a user
// message in the form of provider.LateResultText becomes the tool message it
// stands for) and names each tool message after the call it answers, so a
// script sees the same conversation over HTTP as in process; only
// Message.Pending and Message.Error are lost on the wire (a failed call's
// text arrives as "error: <text>", which is also what a script sees in
// process).
//
// Cues: a delay waits before answering; fail answers with the status and an
// OpenAI-style body {"error": {"message", "type", "param", "code"}}; hang
// answers nothing until the client disconnects or the server closes. A
// request no rule matches gets a 400 with code "invalid_request".
type ModelServer struct {
	srv     *httptest.Server
	model   *scripted.Model
	closing chan struct{}

	mu      sync.Mutex
	counts  map[string]int
	records []RequestRecord
}

// RequestRecord is one request the server received.
type RequestRecord struct {
	// Hash is the hex SHA-256 of the request's canonical content: its
	// model, messages and tools, re-encoded as JSON with sorted keys. The
	// same request streamed or not, or with other sampling parameters, has
	// the same hash.
	Hash string
	// Summary is a short line describing the request, for failure messages.
	Summary string
	Time    time.Time
	Stream  bool
	// Rule is the script rule that answered, empty if none did.
	Rule string
	// Request is the request as the script saw it.
	Request turn.ModelRequest
	// Body is the request body as it arrived.
	Body []byte
}

// createdAt is the "created" time of every answer, fixed so that the same
// request gets the same bytes.
const createdAt = 1735689600 // 2025-01-01T00:00:00Z

// RunModelServer starts a ModelServer answering from script, on a random
// port of 127.0.0.1, and closes it at t.Cleanup: hanging and delayed
// requests are released first, so closing never waits on them.
func RunModelServer(t testing.TB, script *scripted.Script) *ModelServer {
	t.Helper()
	if script == nil {
		t.Fatalf("testenv: RunModelServer: nil script")
	}
	s := &ModelServer{
		model:   scripted.NewModel(script),
		closing: make(chan struct{}),
		counts:  map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST /v1/messages", s.anthropicMessages)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.close)
	return s
}

func (s *ModelServer) close() {
	close(s.closing)
	s.srv.Close()
}

// URL returns the base URL of the API, including /v1, as
// provider/openai's Config.BaseURL wants it.
func (s *ModelServer) URL() string { return s.srv.URL + "/v1" }

// Requests returns how many requests the server has received since it
// started or was Reset, counted when they arrive (before any delay, hang
// or failure).
func (s *ModelServer) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Count returns how many requests with the given hash the server has
// received.
func (s *ModelServer) Count(hash string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[hash]
}

// Seen returns the requests received, in the order they arrived.
func (s *ModelServer) Seen() []RequestRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RequestRecord(nil), s.records...)
}

// Reset forgets the requests received and the failures the script's
// "fail ... first K" rules have delivered.
func (s *ModelServer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.counts)
	s.records = nil
	s.model.Reset()
}

func (s *ModelServer) record(rec RequestRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[rec.Hash]++
	s.records = append(s.records, rec)
}

func (s *ModelServer) chatCompletions(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	rec := RequestRecord{Time: time.Now(), Body: body}
	if err != nil {
		return // the client went away
	}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		s.rejectInvalid(w, rec, "invalid_json", "the body is not a chat completion request: "+err.Error())
		return
	}
	req, err := wr.modelRequest()
	if err != nil {
		s.rejectInvalid(w, rec, provider.CodeInvalidRequest, err.Error())
		return
	}
	rec.Hash, rec.Stream, rec.Request = canonicalHash(body), wr.Stream, req
	reply, pace, ok := s.reply(w, r, rec, writeError)
	if !ok {
		return
	}
	id := "chatcmpl-" + rec.Hash[:16]
	if wr.Stream {
		includeUsage := wr.StreamOptions != nil && wr.StreamOptions.IncludeUsage
		writeStream(w, id, req.Model, reply.Response, includeUsage, pace)
		return
	}
	writeCompletion(w, id, req.Model, reply.Response)
}

// reply records a request read into rec and asks the script for its
// answer, then plays the answer's cues: a hang, a delay, a failure
// (written with fail). ok says to write the answer; pace waits between
// the pieces of a stream (false: the client went away).
func (s *ModelServer) reply(w http.ResponseWriter, r *http.Request, rec RequestRecord, fail func(w http.ResponseWriter, status int, code, msg string)) (reply scripted.Reply, pace func() bool, ok bool) {
	rec.Summary = summarize(rec.Request, rec.Stream)
	reply, err := s.model.Reply(rec.Request)
	if err != nil {
		s.record(rec)
		fail(w, http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
		return reply, nil, false
	}
	rec.Rule = reply.Rule
	s.record(rec)
	if reply.Hang {
		s.wait(r, nil)
		return reply, nil, false
	}
	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		defer t.Stop()
		if !s.wait(r, t.C) {
			return reply, nil, false
		}
	}
	if f := reply.Fail; f != nil {
		fail(w, f.Status, "", f.Message)
		return reply, nil, false
	}
	pace = func() bool {
		if reply.Pace <= 0 {
			return true
		}
		t := time.NewTimer(reply.Pace)
		defer t.Stop()
		return s.wait(r, t.C)
	}
	return reply, pace, true
}

// rejectInvalid records a request that could not be read, under the hash
// of its raw body, and answers 400.
func (s *ModelServer) rejectInvalid(w http.ResponseWriter, rec RequestRecord, code, msg string) {
	s.reject(w, rec, code, msg, writeError)
}

// reject is rejectInvalid in the error body of the API asked, which fail
// writes.
func (s *ModelServer) reject(w http.ResponseWriter, rec RequestRecord, code, msg string, fail func(w http.ResponseWriter, status int, code, msg string)) {
	sum := sha256.Sum256(rec.Body)
	rec.Hash = hex.EncodeToString(sum[:])
	rec.Summary = "invalid: " + msg
	s.record(rec)
	fail(w, http.StatusBadRequest, code, msg)
}

// wait blocks until done fires (reporting true) or the client disconnects
// (reporting false). When the server closes first, it aborts the
// connection, as a server going away does. A nil done never fires.
func (s *ModelServer) wait(r *http.Request, done <-chan time.Time) bool {
	select {
	case <-done:
		return true
	case <-r.Context().Done():
		return false
	case <-s.closing:
		panic(http.ErrAbortHandler)
	}
}

// canonicalHash hashes the model, messages and tools of a request body,
// re-encoded with sorted keys and numbers as written.
func canonicalHash(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var all map[string]any
	_ = dec.Decode(&all) // the body decoded before; it decodes again
	canon := map[string]any{"model": all["model"], "messages": all["messages"], "tools": all["tools"]}
	b, _ := json.Marshal(canon) // maps are encoded with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func summarize(req turn.ModelRequest, stream bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "model=%s messages=%d tools=%d", req.Model, len(req.Messages), len(req.Tools))
	if stream {
		b.WriteString(" stream")
	}
	if n := len(req.Messages); n > 0 {
		last := req.Messages[n-1]
		text := last.Text
		if utf8.RuneCountInString(text) > 40 {
			text = string([]rune(text)[:40]) + "..."
		}
		fmt.Fprintf(&b, " last=%s:%q", last.Role, text)
	}
	return b.String()
}

// The wire format: only the fields lash uses.

type wireRequest struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	Tools               []wireTool      `json:"tools"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// modelRequest reads a wire request back into the request lash sent.
func (wr *wireRequest) modelRequest() (turn.ModelRequest, error) {
	req := turn.ModelRequest{Model: wr.Model}
	names := map[string]string{} // call id -> tool name
	for i, wm := range wr.Messages {
		text, err := contentText(wm.Content)
		if err != nil {
			return req, fmt.Errorf("message %d: %v", i, err)
		}
		m := turn.Message{Text: text}
		switch wm.Role {
		case "system", "developer":
			m.Role = turn.RoleSystem
		case "user":
			m.Role = turn.RoleUser
			if id, name, result, ok := provider.ParseLateResult(text); ok {
				m = turn.Message{Role: turn.RoleTool, CallID: id, Name: name, Text: result}
			}
		case "assistant":
			m.Role = turn.RoleAssistant
			for _, tc := range wm.ToolCalls {
				m.ToolCalls = append(m.ToolCalls, turn.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
				names[tc.ID] = tc.Function.Name
			}
		case "tool":
			m.Role, m.CallID, m.Name = turn.RoleTool, wm.ToolCallID, names[wm.ToolCallID]
		default:
			return req, fmt.Errorf("message %d: unknown role %q", i, wm.Role)
		}
		req.Messages = append(req.Messages, m)
	}
	for _, wt := range wr.Tools {
		spec := turn.ToolSpec{Name: wt.Function.Name, Description: wt.Function.Description}
		if len(wt.Function.Parameters) > 0 {
			var b bytes.Buffer
			if err := json.Compact(&b, wt.Function.Parameters); err != nil {
				return req, fmt.Errorf("tool %s: %v", spec.Name, err)
			}
			spec.Schema = b.String()
		}
		req.Tools = append(req.Tools, spec)
	}
	s := &req.Sampling
	s.Temperature, s.TopP = wr.Temperature, wr.TopP
	s.MaxTokens = max(wr.MaxTokens, wr.MaxCompletionTokens)
	if len(wr.Stop) > 0 && string(wr.Stop) != "null" {
		var one string
		if json.Unmarshal(wr.Stop, &one) == nil {
			s.Stop = []string{one}
		} else if err := json.Unmarshal(wr.Stop, &s.Stop); err != nil {
			return req, fmt.Errorf("stop: %v", err)
		}
	}
	return req, nil
}

// contentText reads a message's content: a string, null, or an array of
// text parts, joined.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content is neither text nor an array of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

type wireUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func usageOf(u turn.Usage) *wireUsage {
	return &wireUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.Total()}
}

type wireCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []wireChoice `json:"choices"`
	Usage   *wireUsage   `json:"usage,omitempty"`
}

type wireChoice struct {
	Index        int         `json:"index"`
	Message      *wireOutput `json:"message,omitempty"`
	Delta        *wireOutput `json:"delta,omitempty"`
	FinishReason *string     `json:"finish_reason"`
	Logprobs     *struct{}   `json:"logprobs"`
}

type wireOutput struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	Refusal   *string        `json:"refusal,omitempty"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

func toolCalls(calls []turn.ToolCall) []wireToolCall {
	out := make([]wireToolCall, len(calls))
	for i, c := range calls {
		out[i].ID, out[i].Type = c.ID, "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, c.Arguments
	}
	return out
}

func writeCompletion(w http.ResponseWriter, id, model string, resp turn.ModelResponse) {
	finish := string(resp.Finish)
	out := &wireOutput{Role: "assistant", ToolCalls: toolCalls(resp.ToolCalls)}
	if resp.Text != "" || len(resp.ToolCalls) == 0 {
		out.Content = &resp.Text
	}
	writeJSON(w, http.StatusOK, wireCompletion{
		ID: id, Object: "chat.completion", Created: createdAt, Model: model,
		Choices: []wireChoice{{Message: out, FinishReason: &finish}},
		Usage:   usageOf(resp.Usage),
	})
}

// writeStream sends the answer as OpenAI streams it: a first chunk with the
// role, the text in Chunks (pace waits between them; false ends the
// stream there), each tool call as a chunk with its id and name followed by
// its arguments in two pieces, a chunk with the finish reason, the usage
// chunk if asked for, and [DONE].
func writeStream(w http.ResponseWriter, id, model string, resp turn.ModelResponse, includeUsage bool, pace func() bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(choices []wireChoice, usage *wireUsage) {
		b, _ := json.Marshal(wireCompletion{
			ID: id, Object: "chat.completion.chunk", Created: createdAt, Model: model,
			Choices: choices, Usage: usage,
		})
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	delta := func(d wireOutput) { send([]wireChoice{{Delta: &d}}, nil) }

	empty := ""
	delta(wireOutput{Role: "assistant", Content: &empty})
	for i, piece := range scripted.Chunks(resp.Text) {
		if i > 0 && !pace() {
			return
		}
		delta(wireOutput{Content: &piece})
	}
	for i, c := range resp.ToolCalls {
		head := toolCalls([]turn.ToolCall{{ID: c.ID, Name: c.Name}})[0]
		head.Index = &i
		delta(wireOutput{ToolCalls: []wireToolCall{head}})
		half := len(c.Arguments) / 2
		for half > 0 && !utf8.RuneStart(c.Arguments[half]) {
			half--
		}
		for _, part := range []string{c.Arguments[:half], c.Arguments[half:]} {
			var tc wireToolCall
			tc.Index, tc.Function.Arguments = &i, part
			delta(wireOutput{ToolCalls: []wireToolCall{tc}})
		}
	}
	finish := string(resp.Finish)
	send([]wireChoice{{Delta: &wireOutput{}, FinishReason: &finish}}, nil)
	if includeUsage {
		send([]wireChoice{}, usageOf(resp.Usage))
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// writeError answers with an OpenAI-style error body. An empty code is
// sent as null.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status >= 500:
		typ = "server_error"
	}
	var c *string
	if code != "" {
		c = &code
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": c,
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
