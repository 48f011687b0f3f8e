package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lash-run/lash/turn"
)

// Codes lash gives to failures that carry no code of the provider's own. An
// HTTP error without a code from the server gets "http_<status>".
const (
	// CodeCanceled: the caller's context was cancelled. Terminal.
	CodeCanceled = "canceled"
	// CodeDeadlineExceeded: the caller's context passed its deadline.
	// Terminal: use the provider's per-request timeout for a retryable one.
	CodeDeadlineExceeded = "deadline_exceeded"
	// CodeTimeout: the provider's per-request timeout expired. Retryable.
	CodeTimeout = "timeout"
	// CodeConnection: the connection was refused, reset or closed early.
	// Retryable.
	CodeConnection = "connection"
	// CodeStream: the server reported an error in the middle of a stream.
	// Retryable.
	CodeStream = "stream_error"
	// CodeBadResponse: the response could not be read as an answer. Terminal.
	CodeBadResponse = "bad_response"
	// CodeTooLarge: the response was longer than the provider accepts.
	// Terminal: the same request would most likely get the same answer.
	CodeTooLarge = "response_too_large"
	// CodeInvalidRequest: the request cannot be sent as it is (no model, a
	// tool schema that is not a JSON object, ...). Terminal.
	CodeInvalidRequest = "invalid_request"
	// CodeInternal: an error nobody classified. Terminal.
	CodeInternal = "internal"
)

// Error is a failed model call, classified. Status is the HTTP status the
// server answered with, or 0 when there was no answer. Code is the server's
// error code when it gave one (for example "rate_limit_exceeded"), otherwise
// one of the Code constants or "http_<status>". Err is the cause, if any;
// Error unwraps to it. RetryAfter is how long the server asked the caller to
// wait before retrying (its Retry-After header), zero when it did not say;
// it is set only on a retryable error.
type Error struct {
	Status     int
	Code       string
	Message    string
	Retryable  bool
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	s := "provider: "
	if e.Status != 0 {
		s += strconv.Itoa(e.Status) + " "
	}
	s += e.Code
	if d := e.detail(); d != "" {
		s += ": " + d
	}
	return s
}

// detail is the message, followed by the cause's text when that adds
// something: an HTTP error's cause only repeats its status.
func (e *Error) detail() string {
	if e.Err == nil || e.Status != 0 {
		return e.Message
	}
	if e.Message == "" {
		return e.Err.Error()
	}
	return e.Message + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// RetryableStatus reports whether an HTTP status means the same request may
// succeed later: 408, 409, 429 and every 5xx.
func RetryableStatus(status int) bool {
	switch {
	case status == http.StatusRequestTimeout,
		status == http.StatusConflict,
		status == http.StatusTooManyRequests,
		status >= 500:
		return true
	}
	return false
}

// StatusError is the Error for an HTTP error status. An empty code becomes
// "http_<status>" and an empty message the status text.
func StatusError(status int, code, message string) *Error {
	if code == "" {
		code = "http_" + strconv.Itoa(status)
	}
	if message == "" {
		message = http.StatusText(status)
	}
	return &Error{Status: status, Code: code, Message: message, Retryable: RetryableStatus(status)}
}

// ContextError is the terminal Error for the end of the caller's context:
// err is ctx.Err() (or an error wrapping it), and the Error unwraps to it.
func ContextError(err error) *Error {
	code := CodeCanceled
	if errors.Is(err, context.DeadlineExceeded) {
		code = CodeDeadlineExceeded
	}
	return &Error{Code: code, Message: "the caller ended the call", Err: err}
}

// CallError converts an error returned by a provider's Complete into the
// turn machine's CallError. An *Error anywhere in err's chain keeps its
// classification and its RetryAfter. Otherwise the end of a context is
// terminal (code "canceled" or "deadline_exceeded"), and anything else is
// terminal with code "internal". CallError(nil) is nil.
//
// The CallError is journaled, so its code and message pass through Redact
// (without secrets: only a provider knows its own) even when the provider
// has redacted them already.
func CallError(err error) *turn.CallError {
	if err == nil {
		return nil
	}
	var pe *Error
	switch {
	case errors.As(err, &pe):
		msg := pe.detail()
		if pe.Status != 0 {
			msg = fmt.Sprintf("%d %s", pe.Status, msg)
		}
		ra := pe.RetryAfter
		if !pe.Retryable || ra < 0 {
			ra = 0
		}
		return &turn.CallError{Retryable: pe.Retryable, Code: Redact(pe.Code), Message: Redact(msg), RetryAfter: ra}
	case errors.Is(err, context.Canceled):
		return &turn.CallError{Code: CodeCanceled, Message: Redact(err.Error())}
	case errors.Is(err, context.DeadlineExceeded):
		return &turn.CallError{Code: CodeDeadlineExceeded, Message: Redact(err.Error())}
	}
	return &turn.CallError{Code: CodeInternal, Message: Redact(err.Error())}
}
