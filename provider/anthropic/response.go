package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/turn"
)

// fromMessage maps an answer: its text blocks joined, its tool uses as
// tool calls, its stop reason and usage. Thinking blocks are not kept.
func fromMessage(m *sdk.Message) (turn.ModelResponse, error) {
	var r turn.ModelResponse
	var text strings.Builder
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := string(b.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			r.ToolCalls = append(r.ToolCalls, turn.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	r.Text = text.String()
	switch m.StopReason {
	case sdk.StopReasonToolUse:
		r.Finish = turn.FinishToolCalls
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		r.Finish = turn.FinishLength
	case sdk.StopReasonRefusal:
		r.Finish = turn.FinishContentFilter
	case "":
		return r, &Error{Code: provider.CodeBadResponse, Message: "the answer has no stop reason"}
	default:
		r.Finish = turn.FinishStop
	}
	// Cached input is input too: what the budget counts is what the model
	// read.
	u := m.Usage
	r.Usage = turn.Usage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens}
	return r, nil
}

// readStream reads a streamed answer into the message the same request
// gets whole, telling onDelta each piece of text.
func readStream(stream *ssestream.Stream[sdk.MessageStreamEventUnion], onDelta func(string), limit *provider.BodyLimit) (turn.ModelResponse, error) {
	defer stream.Close()
	var m sdk.Message
	var size int64
	stopped := false
	for stream.Next() {
		ev := stream.Current()
		if err := m.Accumulate(ev); err != nil {
			return turn.ModelResponse{}, &Error{Code: provider.CodeBadResponse, Message: err.Error(), Err: err}
		}
		switch ev.Type {
		case "content_block_delta":
			size += int64(len(ev.Delta.Text) + len(ev.Delta.PartialJSON))
			if err := limit.Answer(size); err != nil {
				return turn.ModelResponse{}, err
			}
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				onDelta(ev.Delta.Text)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return turn.ModelResponse{}, err
	}
	if !stopped {
		return turn.ModelResponse{}, &Error{Code: provider.CodeStream, Message: "the stream ended before the answer did", Retryable: true}
	}
	return fromMessage(&m)
}

// classify turns whatever a call failed with into an *Error. ctx is the
// caller's context, callCtx the one with the per-request timeout, raw the
// HTTP response if one arrived.
func (c *Client) classify(ctx, callCtx context.Context, err error, raw *http.Response, limit *provider.BodyLimit) *Error {
	if cerr := ctx.Err(); cerr != nil {
		return provider.ContextError(cerr)
	}
	if limit.Hit() || errors.Is(err, ErrResponseTooLarge) {
		e := &Error{Code: provider.CodeTooLarge, Err: ErrResponseTooLarge,
			Message: fmt.Sprintf("the response is larger than the limit of %d bytes (Config.MaxResponseBytes)", limit.Max)}
		if raw != nil {
			e.Status = raw.StatusCode
		}
		return e
	}
	if callCtx.Err() != nil && errors.Is(context.Cause(callCtx), ErrTimeout) {
		return &Error{Code: provider.CodeTimeout, Message: fmt.Sprintf("no complete answer within %v", c.cfg.Timeout), Retryable: true, Err: ErrTimeout}
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		code, msg := string(apiErr.Type()), apiErr.Message
		if code == "" || msg == "" {
			if c2, m2 := errorFields([]byte(apiErr.RawJSON())); c2 != "" || m2 != "" {
				code, msg = c2, m2
			}
		}
		if apiErr.StatusCode < 400 {
			// An error event in the middle of a stream the server began
			// with 200.
			return streamError(code, msg, err)
		}
		e := provider.StatusError(apiErr.StatusCode, code, msg)
		e.Err = err
		return retryAfter(provider.ShouldRetry(e, raw), raw)
	}
	if raw != nil && raw.StatusCode >= 400 {
		var body []byte
		if raw.Body != nil {
			body, _ = io.ReadAll(io.LimitReader(raw.Body, 64<<10))
		}
		code, msg := errorFields(body)
		e := provider.StatusError(raw.StatusCode, code, msg)
		e.Err = err
		return retryAfter(provider.ShouldRetry(e, raw), raw)
	}
	if msg, ok := strings.CutPrefix(err.Error(), "received error while streaming: "); ok {
		code, text := errorFields([]byte(msg))
		if code == "" {
			text = msg
		}
		return streamError(code, text, err)
	}
	return provider.TransportError(err)
}

// streamError is an error event in the middle of a stream: retryable
// unless its type says the request itself is wrong.
func streamError(code, msg string, err error) *Error {
	if code == "" {
		code = provider.CodeStream
	}
	switch code {
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large":
		return &Error{Code: code, Message: msg, Err: err}
	}
	return &Error{Code: code, Message: msg, Retryable: true, Err: err}
}

// errorFields reads the type and message of the API's error body,
// {"type": "error", "error": {"type", "message"}}.
func errorFields(body []byte) (code, msg string) {
	var b struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil {
		return "", ""
	}
	return b.Error.Type, b.Error.Message
}

// retryAfter sets the wait the server asked for on a retryable error.
func retryAfter(e *Error, raw *http.Response) *Error {
	if raw == nil || !e.Retryable {
		return e
	}
	if d, ok := provider.RetryAfter(raw.Header, time.Now()); ok {
		e.RetryAfter = d
	}
	return e
}
