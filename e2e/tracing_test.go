package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// lash-node with --otlp-endpoint exports its spans over OTLP/HTTP: an
// in-process receiver gets the turn's span and its effects' spans, by the
// time the node has drained on SIGTERM.
func TestNodeExportsTraces(t *testing.T) {
	var mu sync.Mutex
	spans := map[string]int{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collector.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[s.Name]++
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer recv.Close()
	d := newDeployment(t)
	p := d.node("node-a", echoScript, "--otlp-endpoint", recv.URL)
	seq := d.send("s1", "k1", []byte(`{"text":"hi"}`))
	d.committed("s1", fmt.Sprintf("in-%d", seq))
	if code := p.signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("lash-node exited %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if spans["lash.turn"] != 1 || spans["lash.llm-call"] != 1 {
		t.Fatalf("spans received: %v", spans)
	}
}
