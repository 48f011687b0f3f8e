package openai

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
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
	if limit.hit.Load() || errors.Is(err, ErrResponseTooLarge) {
		e := &Error{
			Code:    provider.CodeTooLarge,
			Message: fmt.Sprintf("the response is larger than the limit of %d bytes (Config.MaxResponseBytes)", limit.max),
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
		return retryAfter(shouldRetry(e, raw), raw, time.Now())
	}
	if raw != nil && raw.StatusCode >= 400 {
		// An error status with a body the SDK could not read as an error.
		e := statusError(raw.StatusCode, raw)
		e.Err = err
		return retryAfter(shouldRetry(e, raw), raw, time.Now())
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
	return transportError(err)
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

// shouldRetry lets the server's x-should-retry header overrule the status.
func shouldRetry(e *Error, raw *http.Response) *Error {
	if raw == nil {
		return e
	}
	switch raw.Header.Get("x-should-retry") {
	case "true":
		e.Retryable = true
	case "false":
		e.Retryable = false
	}
	return e
}

// retryAfter sets how long a server asked to wait before a retry, from
// Retry-After (delta-seconds or an HTTP date, RFC 9110) or OpenAI's
// retry-after-ms, which is finer and wins. Only a retryable error carries
// it: for a terminal one there is no retry to delay.
func retryAfter(e *Error, raw *http.Response, now time.Time) *Error {
	if raw == nil || !e.Retryable {
		return e
	}
	if d, ok := parseRetryAfterMs(raw.Header.Get("retry-after-ms")); ok {
		e.RetryAfter = d
		return e
	}
	if d, ok := parseRetryAfter(raw.Header.Get("Retry-After"), now); ok {
		e.RetryAfter = d
	}
	return e
}

// maxRetryAfter keeps a server's wait representable; the turn machine caps
// it far lower anyway (turn.Limits.MaxBackoff).
const maxRetryAfter = 24 * time.Hour

func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	} else if errors.Is(err, strconv.ErrRange) {
		return maxRetryAfter, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	// A date already past asks for no wait.
	return min(max(at.Sub(now), 0), maxRetryAfter), true
}

func parseRetryAfterMs(v string) (time.Duration, bool) {
	ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(ms) || ms < 0 {
		return 0, false
	}
	if ms > float64(maxRetryAfter/time.Millisecond) {
		return maxRetryAfter, true
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// transportError classifies a failure without an HTTP status.
func transportError(err error) *Error {
	var (
		certErr    *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		dnsErr     *net.DNSError
		netErr     net.Error
		urlErr     *url.Error
		syntaxErr  *json.SyntaxError
		typeErr    *json.UnmarshalTypeError
		terminal   = &Error{Code: provider.CodeConnection, Message: "cannot reach the server", Err: err}
		connection = &Error{Code: provider.CodeConnection, Message: "the connection failed", Retryable: true, Err: err}
	)
	switch {
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		terminal.Message = "the server's certificate is not trusted"
		return terminal
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		terminal.Message = "the server's host name does not resolve"
		return terminal
	case errors.Is(err, syscall.ECONNREFUSED):
		connection.Message = "the connection was refused"
		return connection
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		connection.Message = "the connection was reset"
		return connection
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		connection.Message = "the connection closed early"
		return connection
	case errors.As(err, &netErr) && netErr.Timeout():
		return &Error{Code: provider.CodeTimeout, Message: "the network timed out", Retryable: true, Err: err}
	case errors.As(err, &syntaxErr), errors.As(err, &typeErr):
		return &Error{Code: provider.CodeBadResponse, Message: "the response is not the JSON expected", Err: err}
	case errors.As(err, &netErr), errors.As(err, &urlErr):
		return connection
	case strings.Contains(err.Error(), "stream error"), strings.Contains(err.Error(), "http2:"):
		// An HTTP/2 stream reset mid-answer; net/http does not export
		// these error types.
		return connection
	}
	return &Error{Code: provider.CodeInternal, Message: err.Error(), Err: err}
}
