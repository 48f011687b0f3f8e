package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash"
	"github.com/lash-run/lash/gateway"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
)

const script = `
rule approve
  when user contains deploy
  when tools = 0
  call wait_for_approval {"request":"deploy to production"}

rule deployed
  when user contains deploy
  say Deployed.

rule weather
  when user contains weather
  when tools = 0
  call get_weather {"city":"Oslo"}

rule weather-answer
  when user contains weather
  pace 2ms
  say It is cold in Oslo, as usual in winter.

rule story
  when user contains story
  pace 150ms
  say Once upon a time a durable runtime kept every word it said, and when the page reloaded the story went on exactly where it was.

rule slow
  when user contains slowly
  pace 30ms
  say one two three four five six seven eight nine ten eleven twelve

default
  pace 2ms
  say Hello there, this answer streams in pieces.
`

var secret = []byte("a test secret of at least thirty-two bytes")

type rig struct {
	t      *testing.T
	ctx    context.Context
	srv    *testenv.Server
	node   *lash.Node
	gw     *gateway.Gateway
	http   *httptest.Server
	client *nodeapi.Client
}

func newRig(t *testing.T, mod ...func(*gateway.Config)) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := testenv.RunJetStream(t)
	reg := tools.New()
	if err := builtin.Register(reg, streams.DefaultPrefix, time.Now); err != nil {
		t.Fatal(err)
	}
	weather, err := tools.Func("get_weather", "the weather in a city", func(_ context.Context, a struct {
		City string `json:"city"`
	}) (string, error) {
		return "-3C in " + a.City, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(weather); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := lash.Open(ctx, lash.WithConn(srv.Conn(t)), lash.WithNodeID("node-a"),
		lash.WithModel(scripted.NewModel(scripted.MustParse(script))), lash.WithTools(reg),
		lash.WithMachine(turn.Config{Model: "scripted"}), lash.WithLogger(quiet),
		lash.WithProjection(t.TempDir()), lash.WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	api, err := nodeapi.Start(n, nodeapi.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = n.Serve(ctx) }()
	// The gateway has a connection of its own, as one on another host.
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := gateway.Config{Auth: gateway.AuthConfig{HMACSecret: secret}, Origins: []string{"https://app.example"}, Logger: quiet}
	for _, m := range mod {
		m(&cfg)
	}
	gw, err := gateway.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(gw.Handler())
	t.Cleanup(func() {
		gw.Close()
		hs.Close()
		cancel()
		<-served
		api.Stop()
		n.Close(context.Background())
	})
	return &rig{t: t, ctx: ctx, srv: srv, node: n, gw: gw, http: hs, client: nodeapi.NewClient(srv.Conn(t), "")}
}

// token signs a token for grant, valid for an hour.
func token(t *testing.T, g gateway.Grant, mod ...func(jwt.MapClaims)) string {
	t.Helper()
	c := jwt.MapClaims{"sub": "user-1", "aud": "lash", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), "lash": g}
	for _, m := range mod {
		m(c)
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// call makes a request; body is JSON-encoded unless it is a string.
func (r *rig) call(method, path, tok string, body any, headers ...string) (*http.Response, []byte) {
	r.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			r.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(r.ctx, method, r.http.URL+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res, out
}

// frame is one SSE event.
type frame struct {
	id, event, data string
}

// sseReader reads frames off a streaming response.
type sseReader struct {
	res *http.Response
	br  *bufio.Reader
}

func (r *rig) open(method, path, tok string, body any, headers ...string) *sseReader {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(r.ctx, method, r.http.URL+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { res.Body.Close() })
	return &sseReader{res: res, br: bufio.NewReader(res.Body)}
}

// next reads the next frame (comments skipped); io.EOF at the end.
func (s *sseReader) next() (frame, error) {
	var f frame
	seen := false
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			return f, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if seen {
				return f, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			f.id, seen = line[4:], true
		case strings.HasPrefix(line, "event: "):
			f.event, seen = line[7:], true
		case strings.HasPrefix(line, "data: "):
			f.data, seen = f.data+line[6:], true
		case strings.HasPrefix(line, "retry: "):
		}
	}
}

func (s *sseReader) close() { s.res.Body.Close() }

// chunks reads data frames as JSON objects until the stream ends or stop
// says so.
func (s *sseReader) chunks(t *testing.T, stop func(map[string]any) bool) []map[string]any {
	t.Helper()
	var out []map[string]any
	for {
		f, err := s.next()
		if err != nil {
			return out
		}
		if f.data == "[DONE]" {
			out = append(out, map[string]any{"type": "[DONE]"})
			return out
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(f.data), &m); err != nil {
			t.Fatalf("frame %q: %v", f.data, err)
		}
		out = append(out, m)
		if os.Getenv("SSE_DEBUG") != "" {
			t.Logf("%s", f.data)
		}
		if stop != nil && stop(m) {
			return out
		}
	}
}
