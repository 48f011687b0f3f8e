package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/openai/openai-go/v3"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/openai"
)

// A server that echoes the caller's credentials in its error bodies, in
// every shape an error reaches the caller: an OpenAI error object, a body
// the SDK cannot read as one (taken as text), plain text, and an error
// event inside a stream. None of it may leave Complete or reach the
// journal (CallError).
func TestErrorsCarryNoSecrets(t *testing.T) {
	const key = "sk-proj-S3cr3t_k3y-0123456789abcdef"
	bodies := []struct {
		name        string
		status      int
		contentType string
		body        func(auth string) string
		sdkError    bool // the cause is the SDK's *Error
	}{
		{"openai 401", 401, "application/json", func(auth string) string {
			return fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %s. You sent Authorization: %s","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, key, auth)
		}, true},
		{"echoed headers 400", 400, "application/json", func(auth string) string {
			return fmt.Sprintf(`{"detail":"bad request","headers":{"authorization":"%s","x-trace":"t1"}}`, auth)
		}, false},
		{"plain text 400", 400, "text/plain", func(auth string) string {
			return fmt.Sprintf("rejected\r\nAuthorization: %s\r\nkey=%s", auth, key)
		}, false},
		{"error string 429", 429, "application/json", func(auth string) string {
			return fmt.Sprintf(`{"error":"quota exceeded for %s"}`, strings.TrimPrefix(auth, "Bearer "))
		}, false},
		{"bare bearer 403", 403, "application/json", func(auth string) string {
			return fmt.Sprintf(`{"error":{"message":"token %s is not allowed here","code":"forbidden"}}`, auth)
		}, true},
	}
	for _, tc := range bodies {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				var echoed atomic.Bool
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					auth := r.Header.Get("Authorization")
					echoed.Store(auth == "Bearer "+key)
					w.Header().Set("Content-Type", tc.contentType)
					w.WriteHeader(tc.status)
					fmt.Fprint(w, tc.body(auth))
				}))
				defer srv.Close()
				c := newClient(t, srv.URL+"/v1", func(cfg *openai.Config) { cfg.APIKey = key })
				var onDelta func(string)
				if stream {
					onDelta = func(string) {}
				}
				_, err := c.Complete(context.Background(), ask("hi"), onDelta)
				if !echoed.Load() {
					t.Fatal("the server did not see the key, so it echoed none")
				}
				assertNoSecret(t, err, key)
				var e *openai.Error
				if !errors.As(err, &e) || e.Status != tc.status || e.Retryable != provider.RetryableStatus(tc.status) {
					t.Fatalf("got %+v, want a classified %d", e, tc.status)
				}
				if !strings.Contains(e.Message, provider.RedactMark) {
					t.Fatalf("message %q shows no redaction", e.Message)
				}
				// The redacted error still unwraps to the SDK's.
				var apiErr *sdk.Error
				if tc.sdkError && (!errors.As(err, &apiErr) || apiErr.StatusCode != tc.status) {
					t.Fatalf("%v does not unwrap to the SDK's *Error", err)
				}
			})
		}
	}

	t.Run("stream error event", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"error\":{\"message\":\"key %s hit its quota (%s)\",\"code\":\"quota\"}}\n\n", key, r.Header.Get("Authorization"))
		}))
		defer srv.Close()
		c := newClient(t, srv.URL+"/v1", func(cfg *openai.Config) { cfg.APIKey = key })
		_, err := c.Complete(context.Background(), ask("hi"), func(string) {})
		assertNoSecret(t, err, key)
		var e *openai.Error
		if !errors.As(err, &e) || e.Code != "quota" || !e.Retryable {
			t.Fatalf("got %+v, want a retryable stream error", e)
		}
	})
}

func assertNoSecret(t *testing.T, err error, key string) {
	t.Helper()
	if err == nil {
		t.Fatal("the call succeeded")
	}
	for where, text := range map[string]string{
		"err.Error()":            err.Error(),
		"%+v":                    fmt.Sprintf("%+v", err),
		"%#v":                    fmt.Sprintf("%#v", err),
		"CallError(err).Message": openai.CallError(err).Message,
		"CallError(err).Code":    openai.CallError(err).Code,
	} {
		if strings.Contains(text, key) || strings.Contains(text, "Bearer sk-") {
			t.Errorf("%s carries the key: %s", where, text)
		}
	}
	var e *openai.Error
	if errors.As(err, &e) && e.Err != nil && strings.Contains(e.Err.Error(), key) {
		t.Errorf("the cause's text carries the key: %s", e.Err.Error())
	}
}
