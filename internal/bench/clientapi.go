package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash"
	"github.com/lash-run/lash/gateway"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
)

// clientSamples is the fewest samples ClientAPI takes.
const clientSamples = 50

// ClientAPI is what the HTTP client API adds to a message's round: the
// time from a message POSTed to the AI SDK chat endpoint to the first
// streamed piece of its answer, and to its commit (the finish chunk),
// against the same through the node API over NATS (a submit, the
// answer's pieces on a subscription to the session's live subject) timed
// with it, in turns first. Ratios are the medians of the samples' ratios.
func ClientAPI(ctx context.Context, e *Env, n int) ([]Result, error) {
	n = max(n, clientSamples)
	script := `
default
  say The answer, in pieces.
  usage 10 4
`
	dir, err := os.MkdirTemp("", "lash-bench-api")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	node, nc, err := e.node("api", script, lash.WithProjection(dir))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	defer node.Close(context.Background())
	api, err := nodeapi.Start(node, nodeapi.Config{Logger: Quiet})
	if err != nil {
		return nil, err
	}
	defer api.Stop()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { defer close(served); _ = node.Serve(sctx) }()
	defer func() { stop(); <-served }()
	gnc, err := e.Conn()
	if err != nil {
		return nil, err
	}
	defer gnc.Close()
	gc, err := streams.Open(ctx, gnc, streams.Config{Replicas: e.Replicas})
	if err != nil {
		return nil, err
	}
	secret := []byte("a benchmark's secret, thirty-two bytes or more")
	gw, err := gateway.New(gc, gateway.Config{Auth: gateway.AuthConfig{HMACSecret: secret}, Rate: 1e6, Burst: 1e6, Logger: Quiet})
	if err != nil {
		return nil, err
	}
	defer gw.Close()
	hs := httptest.NewServer(gw.Handler())
	defer hs.Close()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"aud": "lash", "exp": time.Now().Add(time.Hour).Unix(),
		"lash": gateway.Grant{SessionPrefix: "api-"}}).SignedString(secret)
	if err != nil {
		return nil, err
	}
	cnc, err := e.Conn()
	if err != nil {
		return nil, err
	}
	defer cnc.Close()
	client := nodeapi.NewClient(cnc, "")
	overNATS := func(i int) (first, commit time.Duration, err error) {
		sid := fmt.Sprintf("api-nats-%d", i)
		msgs := make(chan *nats.Msg, 64)
		sub, err := cnc.ChanSubscribe("lash.live."+sid, msgs)
		if err != nil {
			return 0, 0, err
		}
		defer sub.Unsubscribe()
		if err := cnc.Flush(); err != nil {
			return 0, 0, err
		}
		start := time.Now()
		if _, err := client.Submit(ctx, nodeapi.SubmitRequest{Session: sid, Key: "k", Text: "hi"}); err != nil {
			return 0, 0, err
		}
		for {
			select {
			case m := <-msgs:
				var ev live.Event
				if json.Unmarshal(m.Data, &ev) != nil {
					continue
				}
				if ev.Type == live.TypeTextDelta && first == 0 {
					first = time.Since(start)
				}
				if ev.Type == live.TypeTurnCommitted {
					return first, time.Since(start), nil
				}
			case <-time.After(10 * time.Second):
				return 0, 0, fmt.Errorf("session %s: no commit", sid)
			}
		}
	}
	overHTTP := func(i int) (first, commit time.Duration, err error) {
		body := fmt.Sprintf(`{"id":"api-http-%d","messages":[{"id":"u","role":"user","parts":[{"type":"text","text":"hi"}]}]}`, i)
		req, err := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/ai-sdk/chat", strings.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer res.Body.Close()
		br := bufio.NewReader(res.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return 0, 0, fmt.Errorf("chat %d: %v", i, err)
			}
			switch {
			case strings.Contains(line, `"type":"text-delta"`) && first == 0:
				first = time.Since(start)
			case strings.Contains(line, `"type":"finish"`):
				commit = time.Since(start)
				// Read to the end, as a client does, so its connection
				// is kept for the next request.
				_, err := io.Copy(io.Discard, br)
				return first, commit, err
			}
		}
	}
	var firstRatios, commitRatios []float64
	var natsFirst, natsCommit, httpFirst, httpCommit []time.Duration
	for i := range n + 3 {
		var nf, nc2, hf, hc time.Duration
		var err error
		if i%2 == 0 {
			if nf, nc2, err = overNATS(i); err == nil {
				hf, hc, err = overHTTP(i)
			}
		} else if hf, hc, err = overHTTP(i); err == nil {
			nf, nc2, err = overNATS(i)
		}
		if err != nil {
			return nil, err
		}
		if i < 3 {
			continue
		}
		natsFirst, natsCommit = append(natsFirst, nf), append(natsCommit, nc2)
		httpFirst, httpCommit = append(httpFirst, hf), append(httpCommit, hc)
		firstRatios = append(firstRatios, float64(hf)/float64(nf))
		commitRatios = append(commitRatios, float64(hc)/float64(nc2))
	}
	note := fmt.Sprintf("against the node API over NATS timed with it, the median of %d samples' ratios", len(firstRatios))
	return []Result{
		{Name: "message POST to first streamed piece (" + e.Mode() + ")", Value: ms(median(httpFirst)), Unit: "ms",
			Floor: ms(median(natsFirst)), Ratio: median(firstRatios), Note: note},
		{Name: "message POST to its commit (" + e.Mode() + ")", Value: ms(median(httpCommit)), Unit: "ms",
			Floor: ms(median(natsCommit)), Ratio: median(commitRatios), Note: note},
	}, nil
}
