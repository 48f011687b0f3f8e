package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/openai"
)

const (
	completionBody = `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}`
	streamBody     = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"}}]}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there.\"},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: [DONE]\n\n"
)

// A response one byte over MaxResponseBytes fails the call, terminal and
// classified as too large, whatever the SDK was reading; one at the limit,
// or under it, is an answer. For a stream the limit is of the answer, not
// its framing.
func TestMaxResponseBytes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body        string
		stream      bool
	}{
		{"json", 200, "application/json", completionBody, false},
		{"stream", 200, "text/event-stream", streamBody, true},
		{"error status", 503, "application/json", `{"error":{"message":"` + strings.Repeat("busy ", 40) + `","code":"overloaded"}}`, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", tc.contentType)
			w.WriteHeader(tc.status)
			fmt.Fprint(w, tc.body)
		}))
		defer srv.Close()
		size := int64(len(tc.body))
		var onDelta func(string)
		if tc.stream {
			onDelta = func(string) {}
			size = int64(len("Hello there."))
		}
		for _, limit := range []int64{size - 1, size, size + 1} {
			t.Run(fmt.Sprintf("%s/limit=size%+d", tc.name, limit-size), func(t *testing.T) {
				c := newClient(t, srv.URL+"/v1", func(cfg *openai.Config) { cfg.MaxResponseBytes = limit })
				resp, err := c.Complete(context.Background(), ask("hi"), onDelta)
				if limit < size {
					assertTooLarge(t, err, limit)
					return
				}
				if tc.status != 200 {
					var e *openai.Error
					if !errors.As(err, &e) || e.Code != "overloaded" || !e.Retryable {
						t.Fatalf("got %v, want the server's retryable error", err)
					}
					return
				}
				if err != nil || resp.Text != "Hello there." {
					t.Fatalf("got %+v, %v", resp, err)
				}
			})
		}
	}
}

// A server with far more to send than the limit: the call ends at the
// limit and hangs up, rather than reading everything into memory first. A
// stream's framing may take 64 times the limit (an answer of nothing but
// padding is all framing).
func TestHugeResponseStopsAtLimit(t *testing.T) {
	const limit = 1 << 20
	for _, stream := range []bool{false, true} {
		total := 64 << 20 // far beyond the limit and any socket buffers
		if stream {
			total = 2 * 64 * limit
		}
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			sent := make(chan int, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if stream {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				chunk := []byte(strings.Repeat(": keep-alive padding\n", 512))
				n := 0
				for n < total {
					k, err := w.Write(chunk)
					n += k
					if err != nil {
						break // the client hung up
					}
				}
				sent <- n
			}))
			defer srv.Close()
			c := newClient(t, srv.URL+"/v1", func(cfg *openai.Config) { cfg.MaxResponseBytes = limit })
			var onDelta func(string)
			if stream {
				onDelta = func(string) {}
			}
			_, err := c.Complete(context.Background(), ask("hi"), onDelta)
			assertTooLarge(t, err, limit)
			select {
			case n := <-sent:
				if n >= total {
					t.Fatalf("the server sent all %d bytes: the client read past the limit", n)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server is still sending: the client did not hang up")
			}
		})
	}
}

// A stream's tool calls count their ids and names against the limit, as
// an answer read whole does: calls with long ids and no arguments are an
// answer too.
func TestStreamedCallIDsCount(t *testing.T) {
	const limit = 1 << 10
	var body strings.Builder
	for i := range 40 {
		fmt.Fprintf(&body, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":%d,\"id\":\"call_%d_%s\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"\"}}]}}]}\n\n",
			i, i, strings.Repeat("x", 100))
	}
	body.WriteString("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, body.String())
	}))
	defer srv.Close()
	c := newClient(t, srv.URL+"/v1", func(cfg *openai.Config) { cfg.MaxResponseBytes = limit })
	_, err := c.Complete(context.Background(), ask("hi"), func(string) {})
	assertTooLarge(t, err, limit)
}

func assertTooLarge(t *testing.T, err error, limit int64) {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) || e.Code != provider.CodeTooLarge || e.Retryable || !errors.Is(err, openai.ErrResponseTooLarge) {
		t.Fatalf("got %v, want a terminal %s", err, provider.CodeTooLarge)
	}
	if !strings.Contains(e.Message, strconv.FormatInt(limit, 10)) {
		t.Fatalf("message %q does not name the limit %d", e.Message, limit)
	}
	if ce := openai.CallError(err); ce.Retryable || ce.Code != provider.CodeTooLarge {
		t.Fatalf("CallError %+v", ce)
	}
}

func TestMaxResponseBytesValidate(t *testing.T) {
	if _, err := openai.New(openai.Config{MaxResponseBytes: -1}); !errors.Is(err, openai.ErrInvalidConfig) {
		t.Fatalf("negative MaxResponseBytes: %v", err)
	}
}
