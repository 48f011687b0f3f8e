package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/lash-run/lash/provider"
)

// ErrTimeout is the cause of the retryable error Complete returns when
// Config.Timeout expires.
var ErrTimeout = errors.New("openai: request timed out")

// classify turns whatever a call failed with into an *Error. ctx is the
// caller's context, callCtx the one with the per-request timeout, raw the
// HTTP response if one arrived, limit the call's cap on response bodies.
func (c *Client) classify(ctx, callCtx context.Context, err error, raw *http.Response, limit *bodyLimit) *Error {
	// The caller's cancellation comes first: whatever the transport made of
	// it, the caller asked for the call to end.
	if cerr := ctx.Err(); cerr != nil {
		return provider.ContextError(cerr)
	}
	// A body cut at the cap fails as a status, JSON or stream error,
	// depending on where the SDK was reading; the cap is the real cause.
	if limit.Hit() || errors.Is(err, ErrResponseTooLarge) {
		e := &Error{
			Code:    provider.CodeTooLarge,
			Message: fmt.Sprintf("the response is larger than the limit of %d bytes (Config.MaxResponseBytes)", limit.Max),
			Err:     ErrResponseTooLarge,
		}
		if raw != nil {
			e.Status = raw.StatusCode
		}
		return e
	}
	if callCtx.Err() != nil && errors.Is(context.Cause(callCtx), ErrTimeout) {
		return &Error{
			Code:      provider.CodeTimeout,
			Message:   fmt.Sprintf("no complete answer within %v", c.cfg.Timeout),
			Retryable: true,
			Err:       ErrTimeout,
		}
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		e := provider.StatusError(apiErr.StatusCode, apiErr.Code, apiErr.Message)
		if apiErr.Code == "" || apiErr.Message == "" {
			// A body the SDK read only in part, such as vLLM's older
			// top-level {"message": ..., "code": 400}.
			e = statusError(apiErr.StatusCode, apiErr.Response)
		}
		e.Err = err
		return retryAfter(provider.ShouldRetry(e, raw), raw, time.Now())
	}
	if raw != nil && raw.StatusCode >= 400 {
		// An error status with a body the SDK could not read as an error.
		e := statusError(raw.StatusCode, raw)
		e.Err = err
		return retryAfter(provider.ShouldRetry(e, raw), raw, time.Now())
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		code, msg := errorFields(se.Event.Data)
		if code == "" {
			code = provider.CodeStream
		}
		if msg == "" {
			msg = se.Message
		}
		return &Error{Code: code, Message: msg, Retryable: true, Err: err}
	}
	return provider.TransportError(err)
}

// statusError builds the error for an HTTP status, reading the code and
// message from the body when it has them.
func statusError(status int, res *http.Response) *Error {
	var code, msg string
	if res != nil && res.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		code, msg = errorFields(body)
		if msg == "" {
			msg = strings.TrimSpace(string(body))
			if len(msg) > 200 {
				msg = msg[:200] + "..."
			}
		}
	}
	return provider.StatusError(status, code, msg)
}

// errorFields reads the code and message of an error body in the shapes
// OpenAI-compatible servers use: {"error": {"code", "message"}},
// {"error": "message"} and {"code", "message"}.
func errorFields(body []byte) (code, msg string) {
	var b struct {
		Error   json.RawMessage `json:"error"`
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &b) != nil {
		return "", ""
	}
	var inner struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	var s string
	switch {
	case json.Unmarshal(b.Error, &inner) == nil && (inner.Message != "" || len(inner.Code) > 0):
		return codeString(inner.Code), inner.Message
	case json.Unmarshal(b.Error, &s) == nil:
		return "", s
	}
	return codeString(b.Code), b.Message
}

// codeString reads a code given as a string; numbers (a repeated HTTP
// status) and null are no code.
func codeString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// retryAfter sets how long a server asked to wait before a retry, from
// Retry-After (delta-seconds or an HTTP date, RFC 9110) or OpenAI's
// retry-after-ms, which is finer and wins. Only a retryable error carries
// it: for a terminal one there is no retry to delay.
func retryAfter(e *Error, raw *http.Response, now time.Time) *Error {
	if raw == nil || !e.Retryable {
		return e
	}
	if d, ok := provider.RetryAfter(raw.Header, now); ok {
		e.RetryAfter = d
	}
	return e
}
