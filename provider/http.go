package provider

import (
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
)

// RetryAfter reads how long a server asked to wait before a retry: from
// retry-after-ms (OpenAI's, finer, wins) or Retry-After (delta-seconds or
// an HTTP date, RFC 9110), at most MaxRetryAfter; a date already past asks
// for no wait. ok is false when the headers say nothing readable.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseRetryAfterMs(h.Get("retry-after-ms")); ok {
		return d, true
	}
	return parseRetryAfter(h.Get("Retry-After"), now)
}

// MaxRetryAfter keeps a server's wait representable; the turn machine caps
// it far lower anyway (turn.Limits.MaxBackoff).
const MaxRetryAfter = 24 * time.Hour

func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	} else if errors.Is(err, strconv.ErrRange) {
		return MaxRetryAfter, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	// A date already past asks for no wait.
	return min(max(at.Sub(now), 0), MaxRetryAfter), true
}

func parseRetryAfterMs(v string) (time.Duration, bool) {
	ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(ms) || ms < 0 {
		return 0, false
	}
	if ms > float64(MaxRetryAfter/time.Millisecond) {
		return MaxRetryAfter, true
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// TransportError classifies a failure without an HTTP status.
func TransportError(err error) *Error {
	var (
		certErr    *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		dnsErr     *net.DNSError
		netErr     net.Error
		urlErr     *url.Error
		syntaxErr  *json.SyntaxError
		typeErr    *json.UnmarshalTypeError
		terminal   = &Error{Code: CodeConnection, Message: "cannot reach the server", Err: err}
		connection = &Error{Code: CodeConnection, Message: "the connection failed", Retryable: true, Err: err}
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
		return &Error{Code: CodeTimeout, Message: "the network timed out", Retryable: true, Err: err}
	case errors.As(err, &syntaxErr), errors.As(err, &typeErr):
		return &Error{Code: CodeBadResponse, Message: "the response is not the JSON expected", Err: err}
	case errors.As(err, &netErr), errors.As(err, &urlErr):
		return connection
	case strings.Contains(err.Error(), "stream error"), strings.Contains(err.Error(), "http2:"):
		// An HTTP/2 stream reset mid-answer; net/http does not export
		// these error types.
		return connection
	}
	return &Error{Code: CodeInternal, Message: err.Error(), Err: err}
}

// ShouldRetry lets a server's x-should-retry header overrule the status.
func ShouldRetry(e *Error, raw *http.Response) *Error {
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

// CheckLimits reports what is wrong with a provider's call limits, as its
// Config.Validate words it.
func CheckLimits(timeout time.Duration, maxRetries int, maxResponseBytes int64) error {
	switch {
	case timeout < 0:
		return fmt.Errorf("negative Timeout %v", timeout)
	case maxRetries < 0:
		return fmt.Errorf("negative MaxRetries %d", maxRetries)
	case maxResponseBytes < 0:
		return fmt.Errorf("negative MaxResponseBytes %d", maxResponseBytes)
	}
	return nil
}
