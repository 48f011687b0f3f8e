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
	"os/exec"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash"
	"github.com/lash-run/lash/gateway"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/nodeapi"
	"github.com/nats-io/nats.go"
)

// clientSamples is the fewest samples ClientAPI takes.
const clientSamples = 50

// ClientEnv, set in a process's environment, makes it ClientAPI's client
// (RunClient): a binary that runs ClientAPI calls RunClient first thing
// when it is set (the module root's TestMain does).
const ClientEnv = "LASH_BENCH_CLIENT"

// clientJob is what ClientAPI asks its client process to do.
type clientJob struct {
	NATS  string `json:"nats"`
	HTTP  string `json:"http"`
	Token string `json:"token"`
	N     int    `json:"n"`
}

// clientSample is one message each way, in nanoseconds.
type clientSample struct {
	NATSFirst, NATSCommit, HTTPFirst, HTTPCommit time.Duration
}

// clientReady is the client process's first line: it runs RunClient.
const clientReady = "lash-bench client ready"

// ClientAPI is what the HTTP client API adds to a message's round: the
// time from a message POSTed to the AI SDK chat endpoint to the first
// streamed piece of its answer, and to its commit (the finish chunk),
// against the same through the node API over NATS (a submit, the
// answer's pieces on a subscription to the session's live subject) timed
// with it, in turns first. Both clients run in a process of their own and
// connect over loopback TCP, as clients on other hosts do; the node and
// the gateway share this process and its in-process connection to the
// server, as `lash-node --api` does. Ratios are the medians of the
// samples' ratios.
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
	secret := []byte("a benchmark's secret, thirty-two bytes or more")
	gw, err := gateway.New(node.Streams(), gateway.Config{Auth: gateway.AuthConfig{HMACSecret: secret},
		Rate: 1e6, Burst: 1e6, Logger: Quiet, Local: api})
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
	samples, err := runClient(ctx, clientJob{NATS: e.URL(), HTTP: hs.URL, Token: tok, N: n})
	if err != nil {
		return nil, err
	}
	var firstRatios, commitRatios []float64
	var natsFirst, natsCommit, httpFirst, httpCommit []time.Duration
	for _, s := range samples {
		natsFirst, natsCommit = append(natsFirst, s.NATSFirst), append(natsCommit, s.NATSCommit)
		httpFirst, httpCommit = append(httpFirst, s.HTTPFirst), append(httpCommit, s.HTTPCommit)
		firstRatios = append(firstRatios, float64(s.HTTPFirst)/float64(s.NATSFirst))
		commitRatios = append(commitRatios, float64(s.HTTPCommit)/float64(s.NATSCommit))
	}
	note := fmt.Sprintf("against the node API over NATS timed with it, the median of %d samples' ratios; clients in another process", len(firstRatios))
	return []Result{
		{Name: "message POST to first streamed piece (" + e.Mode() + ")", Value: ms(median(httpFirst)), Unit: "ms",
			Floor: ms(median(natsFirst)), Ratio: median(firstRatios), Note: note},
		{Name: "message POST to its commit (" + e.Mode() + ")", Value: ms(median(httpCommit)), Unit: "ms",
			Floor: ms(median(natsCommit)), Ratio: median(commitRatios), Note: note},
	}, nil
}

// runClient runs job in a child process, this binary again, and reads its
// samples.
func runClient(ctx context.Context, job clientJob) ([]clientSample, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(job.N+10)*10*time.Second)
	defer cancel()
	// A test binary without the TestMain that runs the client runs no
	// test either, and says nothing the parent waits for.
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), ClientEnv+"="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// fail stops the child (one still writing would block on the pipe no
	// one reads) and says why, with what the child wrote to stderr, read
	// once it has exited.
	fail := func(format string, args ...any) ([]clientSample, error) {
		cancel()
		_ = cmd.Wait()
		return nil, fmt.Errorf(format+": %s", append(args, stderr.String())...)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != clientReady {
		return fail("bench: %s did not run the client (a binary that runs ClientAPI calls bench.RunClient when %s is set)", exe, ClientEnv)
	}
	var samples []clientSample
	for sc.Scan() {
		var s clientSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return fail("bench: the client said %q", sc.Text())
		}
		samples = append(samples, s)
	}
	if err := sc.Err(); err != nil {
		return fail("bench: reading the client: %v", err)
	}
	if err := cmd.Wait(); err != nil || len(samples) != job.N {
		return nil, fmt.Errorf("bench: the client process (%v) gave %d of %d samples: %s", err, len(samples), job.N, stderr.String())
	}
	return samples, nil
}

// RunClient runs the client ClientAPI started this process as, when
// ClientEnv says so, and exits; otherwise it returns at once.
func RunClient() {
	spec := os.Getenv(ClientEnv)
	if spec == "" {
		return
	}
	fmt.Println(clientReady)
	if err := client(spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func client(spec string) error {
	var job clientJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	ctx := context.Background()
	nc, err := nats.Connect(job.NATS)
	if err != nil {
		return err
	}
	defer nc.Close()
	api := nodeapi.NewClient(nc, "")
	overNATS := func(i int) (first, commit time.Duration, err error) {
		sid := fmt.Sprintf("api-nats-%d", i)
		msgs := make(chan *nats.Msg, 64)
		sub, err := nc.ChanSubscribe("lash.live."+sid, msgs)
		if err != nil {
			return 0, 0, err
		}
		defer sub.Unsubscribe()
		if err := nc.Flush(); err != nil {
			return 0, 0, err
		}
		start := time.Now()
		if _, err := api.Submit(ctx, nodeapi.SubmitRequest{Session: sid, Key: "k", Text: "hi"}); err != nil {
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
		req, err := http.NewRequestWithContext(ctx, "POST", job.HTTP+"/v1/ai-sdk/chat", strings.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Authorization", "Bearer "+job.Token)
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
	enc := json.NewEncoder(os.Stdout)
	for i := range job.N + 3 {
		var s clientSample
		var err error
		// In turns first, so neither way always meets a warmer server.
		if i%2 == 0 {
			if s.NATSFirst, s.NATSCommit, err = overNATS(i); err == nil {
				s.HTTPFirst, s.HTTPCommit, err = overHTTP(i)
			}
		} else if s.HTTPFirst, s.HTTPCommit, err = overHTTP(i); err == nil {
			s.NATSFirst, s.NATSCommit, err = overNATS(i)
		}
		if err != nil {
			return err
		}
		if i >= 3 { // the first are warm-up
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
	}
	return nil
}
