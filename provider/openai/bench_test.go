package openai_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
)

// BenchmarkRoundTrip measures a full Complete (mapping, the SDK, HTTP on
// loopback, the scripted server, decoding) of a request with tools, tool
// calls and results, answered with two parallel tool calls. Its floor is a
// raw net/http POST of the same body to the same server, read to the end,
// measured in the same run; x-floor is Complete's time over the floor's.
func BenchmarkRoundTrip(b *testing.B) {
	s := testenv.RunModelServer(b, scripted.MustParse(script))
	c := newClient(b, s.URL())
	req := weatherRequest()
	for _, bc := range []struct {
		name    string
		onDelta func(string)
	}{
		{"json", nil},
		{"stream", func(string) {}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			s.Reset()
			// One call first, to capture the body the client sends.
			if _, err := c.Complete(ctx, req, bc.onDelta); err != nil {
				b.Fatal(err)
			}
			body := s.Seen()[0].Body
			s.Reset()

			for b.Loop() {
				if _, err := c.Complete(ctx, req, bc.onDelta); err != nil {
					b.Fatal(err)
				}
			}
			n := b.N
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(n)

			url := s.URL() + "/chat/completions"
			start := time.Now()
			for range n {
				res, err := http.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, res.Body); err != nil {
					b.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("floor request: status %d", res.StatusCode)
				}
			}
			floor := float64(time.Since(start).Nanoseconds()) / float64(n)
			b.ReportMetric(floor, "floor-ns/op")
			b.ReportMetric(perOp/floor, "x-floor")
			s.Reset() // the server keeps every request; let them go
		})
	}
}
