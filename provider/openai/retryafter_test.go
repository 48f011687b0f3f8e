package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/openai"
)

// A server that is busy says how long to wait; the error carries it, and
// so does the CallError the turn machine's retry reads.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		header   map[string]string
		min, max time.Duration // RetryAfter within [min, max]
	}{
		{"429 seconds", 429, map[string]string{"Retry-After": "7"}, 7 * time.Second, 7 * time.Second},
		{"503 seconds", 503, map[string]string{"Retry-After": " 2 "}, 2 * time.Second, 2 * time.Second},
		// An HTTP date has a resolution of a second, and the clock runs on
		// between the server writing it and the client reading it.
		{"503 date", 503, map[string]string{"Retry-After": time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)}, 8 * time.Second, 10 * time.Second},
		{"date in the past", 429, map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0, 0},
		{"retry-after-ms wins", 429, map[string]string{"Retry-After": "7", "retry-after-ms": "1500"}, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"huge", 429, map[string]string{"Retry-After": "99999999999999999999999"}, 24 * time.Hour, 24 * time.Hour},
		{"garbage", 429, map[string]string{"Retry-After": "soon"}, 0, 0},
		{"negative", 429, map[string]string{"Retry-After": "-5"}, 0, 0},
		{"no header", 429, nil, 0, 0},
		// A terminal error is not retried, so it asks for no wait.
		{"terminal 400", 400, map[string]string{"Retry-After": "7"}, 0, 0},
		{"x-should-retry", 400, map[string]string{"Retry-After": "3", "x-should-retry": "true"}, 3 * time.Second, 3 * time.Second},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					for k, v := range tc.header {
						w.Header().Set(k, v)
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tc.status)
					fmt.Fprint(w, `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":null}}`)
				}))
				defer srv.Close()
				c := newClient(t, srv.URL+"/v1")
				var onDelta func(string)
				if stream {
					onDelta = func(string) {}
				}
				_, err := c.Complete(context.Background(), ask("hi"), onDelta)
				var e *openai.Error
				if !errors.As(err, &e) || e.Status != tc.status {
					t.Fatalf("got %v, want a %d", err, tc.status)
				}
				if e.RetryAfter < tc.min || e.RetryAfter > tc.max {
					t.Fatalf("RetryAfter %v, want within [%v, %v]", e.RetryAfter, tc.min, tc.max)
				}
				if ce := openai.CallError(err); ce.RetryAfter != e.RetryAfter || ce.Retryable != e.Retryable {
					t.Fatalf("CallError %+v, want RetryAfter %v", ce, e.RetryAfter)
				}
			})
		}
	}
}
