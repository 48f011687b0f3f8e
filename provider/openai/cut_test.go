package openai_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lash-run/lash/provider"
	"github.com/lash-run/lash/provider/openai"
)

// A stream that ends before its answer: text, then a tool call whose
// arguments stop half-way, and no finish reason.
const cutStream = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"I will delete the fi\"}}]}\n\n" +
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"rm\",\"arguments\":\"{\\\"path\\\":\\\"/tmp/a\"}}]}}]}\n\n"

// A stream whose body ends cleanly before the answer did (the server
// stopped, or a body delimited by the connection's close was cut) is a
// retryable stream error, not a half answer recorded as the model's.
func TestStreamCutIsNoAnswer(t *testing.T) {
	for _, mode := range []string{"chunked", "close-delimited"} {
		t.Run(mode, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if mode == "chunked" {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, cutStream)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				conn, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"+cutStream)
				_ = buf.Flush()
			}))
			defer srv.Close()
			c := newClient(t, srv.URL+"/v1")
			resp, err := c.Complete(context.Background(), ask("hi"), func(string) {})
			var e *openai.Error
			if !errors.As(err, &e) || e.Code != provider.CodeStream || !e.Retryable {
				t.Fatalf("a cut stream: %+v, %v; want a retryable %s", resp, err, provider.CodeStream)
			}
		})
	}
}
