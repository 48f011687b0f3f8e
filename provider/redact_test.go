package provider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider"
)

func TestRedact(t *testing.T) {
	const key = "sk-live_0123456789"
	for _, tc := range []struct {
		in, want string
	}{
		{"no secrets here", "no secrets here"},
		{"Authorization: Bearer xyz", "Authorization: [redacted]"},
		{"authorization: Basic dXNlcjpwYXNz\r\nX-Other: 1", "authorization: [redacted]\r\nX-Other: 1"},
		{`{"authorization":"Bearer xyz","model":"m"}`, `{"authorization":"[redacted]","model":"m"}`},
		{`{"Authorization": "Bearer x\"y", "n": 1}`, `{"Authorization": "[redacted]", "n": 1}`},
		{`{"message":"saw {\"authorization\":\"Basic abc\"}"}`, `{"message":"saw {\"authorization\":\"[redacted]\"}"}`},
		{"map[Authorization:[Bearer xyz] Accept:[*/*]]", "map[Authorization:[redacted] Accept:[*/*]]"},
		{"'authorization': 'Bearer xyz'", "'authorization': '[redacted]'"},
		{"Proxy-Authorization: Bearer xyz", "Proxy-Authorization: [redacted]"},
		{"token Bearer abc.DEF-123_~+/== expired", "token Bearer [redacted] expired"},
		{"bearer xyz", "bearer [redacted]"},
		{"the key " + key + " is revoked", "the key [redacted] is revoked"},
		// A key another secret is part of is replaced whole.
		{"key=" + key + "-and-more", "key=[redacted]"},
		{"authorization failed", "authorization failed"},
	} {
		got := provider.Redact(tc.in, key, key+"-and-more", "")
		if got != tc.want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
		// The generic part is idempotent: CallError may apply it again.
		if again := provider.Redact(got); again != got {
			t.Errorf("Redact(Redact(%q)) = %q, changed", tc.in, again)
		}
	}
	// Escaped forms of a secret.
	const odd = `k/e+y"1`
	for _, s := range []string{"q=k%2Fe%2By%221", `{"k":"k/e+y\"1"}`, "raw k/e+y\"1"} {
		if got := provider.Redact(s, odd); strings.Contains(got, "e+y") || strings.Contains(got, "e%2By") {
			t.Errorf("Redact(%q) = %q, the secret shows", s, got)
		}
	}
}

func TestRedactedErrorKeepsItsCause(t *testing.T) {
	cause := fmt.Errorf("dial with Authorization: Bearer xyz (key sk-1): %w", io.ErrUnexpectedEOF)
	e := &provider.Error{Code: provider.CodeConnection, Message: "key sk-1 refused", Retryable: true, RetryAfter: time.Second, Err: cause}
	r := e.Redacted("sk-1")
	if strings.Contains(r.Error(), "sk-1") || strings.Contains(r.Error(), "xyz") {
		t.Fatalf("Error() = %q", r.Error())
	}
	if strings.Contains(r.Err.Error(), "xyz") || !strings.Contains(r.Err.Error(), provider.RedactMark) {
		t.Fatalf("cause text %q", r.Err.Error())
	}
	if !errors.Is(r, io.ErrUnexpectedEOF) || !errors.Is(r, cause) {
		t.Fatal("the redacted error no longer unwraps to its cause")
	}
	if r.Code != e.Code || !r.Retryable || r.RetryAfter != time.Second {
		t.Fatalf("redaction changed the classification: %+v", r)
	}
	if !strings.Contains(e.Message, "sk-1") {
		t.Fatal("Redacted changed the original")
	}
	// A cause with nothing to hide is kept as it is.
	plain := &provider.Error{Code: provider.CodeCanceled, Err: context.Canceled}
	if got := plain.Redacted("sk-1"); got.Err != context.Canceled {
		t.Fatalf("cause %#v, want context.Canceled itself", got.Err)
	}
	if (*provider.Error)(nil).Redacted() != nil {
		t.Fatal("nil.Redacted() is not nil")
	}
}

// CallError is what gets journaled: it redacts Authorization values and
// bearer tokens even from an error no provider redacted, and keeps a
// retryable error's RetryAfter.
func TestCallErrorRedactsAndKeepsRetryAfter(t *testing.T) {
	for _, err := range []error{
		&provider.Error{Status: 401, Code: "http_401", Message: "you sent Authorization: Bearer xyz"},
		&provider.Error{Code: provider.CodeConnection, Message: "dial", Err: errors.New("proxy said bearer xyz")},
		fmt.Errorf("sent Bearer xyz: %w", context.Canceled),
		errors.New(`upstream echoed {"authorization":"Bearer xyz"}`),
	} {
		ce := provider.CallError(err)
		if strings.Contains(ce.Message, "xyz") || !strings.Contains(ce.Message, provider.RedactMark) {
			t.Errorf("CallError(%v).Message = %q", err, ce.Message)
		}
	}
	ce := provider.CallError(fmt.Errorf("x: %w", &provider.Error{Status: 429, Code: "rate_limit_exceeded", Retryable: true, RetryAfter: 7 * time.Second}))
	if ce.RetryAfter != 7*time.Second || !ce.Retryable {
		t.Fatalf("CallError %+v, want RetryAfter 7s", ce)
	}
	// A terminal error asks for no wait: nothing will be retried.
	if ce := provider.CallError(&provider.Error{Status: 400, RetryAfter: time.Second}); ce.RetryAfter != 0 {
		t.Fatalf("terminal CallError %+v carries a wait", ce)
	}
}
