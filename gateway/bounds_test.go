package gateway_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash/gateway"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The same Idempotency-Key through a gateway made anew (a restart) is the
// same input.
func TestIdempotentAcrossGateways(t *testing.T) {
	r := newRig(t)
	tok := token(t, gateway.Grant{Sessions: []string{"g1"}})
	res, body := r.call("POST", "/v1/sessions/g1/messages", tok, map[string]any{"text": "hello"}, "Idempotency-Key", "k1")
	if res.StatusCode != 202 {
		t.Fatalf("send: %d %s", res.StatusCode, body)
	}
	r.gw.Close()
	c, err := streams.Open(r.ctx, r.srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(c, gateway.Config{Auth: gateway.AuthConfig{HMACSecret: secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	r.http.Config.Handler = gw.Handler()
	res, body = r.call("POST", "/v1/sessions/g1/messages", tok, map[string]any{"text": "hello"}, "Idempotency-Key", "k1")
	var a gateway.Accepted
	if res.StatusCode != 202 || json.Unmarshal(body, &a) != nil || !a.Duplicate || a.Seq != 1 {
		t.Fatalf("the same key through a new gateway: %d %s", res.StatusCode, body)
	}
	if st, err := r.client.Status(r.ctx, "g1"); err != nil || st.Inputs != 1 {
		t.Fatalf("inputs: %+v, %v", st, err)
	}
}

// A reader that stops reading is cut (its stream closed and counted no
// more) once a write has waited WriteTimeout, or it falls 1 MiB behind,
// whichever comes first; the events go on for everyone else.
func TestStalledReaderIsCut(t *testing.T) {
	r := newRig(t, func(c *gateway.Config) { c.WriteTimeout = 500 * time.Millisecond })
	tok := token(t, gateway.Grant{Sessions: []string{"slow"}})
	host := strings.TrimPrefix(r.http.URL, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/sessions/slow/events?from=now HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", host, tok)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("stream: %v, %v", res, err)
	}
	testenv.WaitFor(t, 5*time.Second, func() error {
		if n := r.gw.Streams(); n != 1 {
			return fmt.Errorf("%d streams", n)
		}
		return nil
	})
	// Events for it, far more than the socket's buffers hold; the
	// reader takes none.
	nc := r.srv.Conn(t)
	text := strings.Repeat("x", 16<<10)
	for i := range 2000 {
		b, _ := json.Marshal(live.Event{V: live.Version, Type: live.TypeTextDelta, Session: "slow", Turn: "in-1", At: time.Now(), Effect: uint64(i), Text: text})
		if err := nc.Publish("lash.live.slow", b); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, func() error {
		if n := r.gw.Streams(); n != 0 {
			return fmt.Errorf("%d streams open", n)
		}
		return nil
	})
	// The stream ended (or its connection was closed): what the reader
	// takes now ends, with the cursor to resume from when the gateway
	// could still say it.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var tail strings.Builder
	if _, err := io.Copy(&tail, res.Body); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the cut stream did not end: %v", err)
	}
	if s := tail.String(); strings.HasSuffix(s, "\n\n") && !strings.Contains(s[max(0, len(s)-300):], "event: reconnect") {
		t.Fatalf("a stream that ended whole ends without telling where to resume: %q", s[max(0, len(s)-300):])
	}
}

// Idle streams: each is a map entry in the hub and a connection's
// goroutines and buffers, not a consumer on the servers. A child process
// (this test binary again) holds the client ends, so the figure is the
// gateway's alone. LASH_IDLE_STREAMS sets how many (1000 by default; the
// README's figure is for 10000), held to a budget per stream.
func TestIdleStreams(t *testing.T) {
	if url := os.Getenv("LASH_IDLE_HELPER"); url != "" {
		holdStreams(t, url)
		return
	}
	n := 1000
	if s := os.Getenv("LASH_IDLE_STREAMS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	r := newRig(t, func(c *gateway.Config) { c.StreamsPerToken, c.MaxStreams, c.Rate, c.Burst = n, n, 1e6, 1e6 })
	tok := token(t, gateway.Grant{SessionPrefix: "idle-"})
	consumers := func() int {
		k, err := r.node.Streams().Consumers(r.ctx, streams.Live)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	before := consumers()
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleStreams$")
	cmd.Env = append(os.Environ(), "LASH_IDLE_HELPER="+r.http.URL, "LASH_IDLE_TOKEN="+tok, fmt.Sprint("LASH_IDLE_STREAMS=", n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	testenv.WaitFor(t, 60*time.Second, func() error {
		if k := r.gw.Streams(); k != n {
			return fmt.Errorf("%d of %d streams open; the holder says %q", k, n, out.String())
		}
		return nil
	})
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	per := (int64(m1.HeapInuse+m1.StackInuse) - int64(m0.HeapInuse+m0.StackInuse)) / int64(n)
	t.Logf("%d idle streams: %d bytes each in the gateway (heap and stacks), %d consumers on LIVE", n, per, consumers()-before)
	if k := consumers() - before; k > 1 {
		t.Fatalf("%d consumers on LIVE for %d streams", k, n)
	}
	if per > 48<<10 {
		t.Fatalf("%d bytes a stream, over the 48 KiB budget", per)
	}
	// One more than the gateway's bound is refused with 503.
	other := token(t, gateway.Grant{SessionPrefix: "idle-"}, func(c jwt.MapClaims) { c["sub"] = "other" })
	if res, body := r.call("GET", "/v1/sessions/idle-x/events", other, nil); res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("a stream past the bound: %d %s", res.StatusCode, body)
	}
}

// holdStreams opens the streams TestIdleStreams counts and holds them
// until its stdin closes.
func holdStreams(t *testing.T, url string) {
	n, _ := strconv.Atoi(os.Getenv("LASH_IDLE_STREAMS"))
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	client := &http.Client{Transport: tr}
	for i := range n {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/sessions/idle-%d/events?from=now", url, i), nil)
		req.Header.Set("Authorization", "Bearer "+os.Getenv("LASH_IDLE_TOKEN"))
		res, err := client.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("stream %d: %v %v", i, res, err)
		}
		defer res.Body.Close()
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// An idle stream gets a heartbeat comment, so proxies keep it open and a
// reader knows the gateway is there.
func TestHeartbeat(t *testing.T) {
	r := newRig(t, func(c *gateway.Config) { c.Heartbeat = 50 * time.Millisecond })
	tok := token(t, gateway.Grant{Sessions: []string{"hb"}})
	s := r.open("GET", "/v1/sessions/hb/events?from=now", tok, nil)
	pings := 0
	for pings < 3 {
		line, err := s.br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == ": ping\n" {
			pings++
		}
	}
}

// A token holds at most StreamsPerToken streams (429 past it); a gateway
// that drains tells its streams to reconnect; no token reaches NATS.
func TestStreamLimitsAndDrain(t *testing.T) {
	r := newRig(t, func(c *gateway.Config) { c.StreamsPerToken = 2 })
	tok := token(t, gateway.Grant{SessionPrefix: "lim-", Agents: []string{"support"}})
	// Everything on the server, to look for the token in it.
	nc := r.srv.Conn(t)
	var seen []string
	var mu sync.Mutex
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m.Subject+" "+string(m.Data)+fmt.Sprint(m.Header))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a := r.open("GET", "/v1/sessions/lim-1/events?from=now", tok, nil)
	b := r.open("GET", "/v1/sessions/lim-2/events?from=now", tok, nil)
	if res, body := r.call("GET", "/v1/sessions/lim-3/events", tok, nil); res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("a third stream: %d %s", res.StatusCode, body)
	}
	if res, body := r.call("POST", "/v1/sessions", tok, map[string]any{"id": "lim-4", "text": "hi", "agent": "research"}, "Idempotency-Key", "k"); res.StatusCode != 403 {
		t.Fatalf("an agent the token does not grant: %d %s", res.StatusCode, body)
	}
	if res, body := r.call("POST", "/v1/sessions/lim-1/messages", tok, map[string]any{"text": "hello"}, "Idempotency-Key", "k"); res.StatusCode != 202 {
		t.Fatalf("send: %d %s", res.StatusCode, body)
	}
	for _, s := range []*sseReader{a, b} {
		if f, err := s.next(); err != nil || f.event != "open" {
			t.Fatalf("open: %+v %v", f, err)
		}
	}
	r.gw.Close()
	for _, s := range []*sseReader{a, b} {
		for {
			f, err := s.next()
			if err != nil {
				t.Fatalf("the stream ended without reconnect: %v", err)
			}
			if f.event == "reconnect" {
				break
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range seen {
		if strings.Contains(m, tok) || strings.Contains(m, strings.Split(tok, ".")[2]) {
			t.Fatalf("the token reached NATS: %.200s", m)
		}
	}
	if len(seen) == 0 {
		t.Fatal("saw nothing on the server")
	}
}

// LIVE made anew (a memory stream after its server restarted): open
// streams are told to reconnect, and the hub follows the new stream, so
// new answers stream again.
func TestLiveMadeAnew(t *testing.T) {
	r := newRig(t)
	tok := token(t, gateway.Grant{SessionPrefix: "re-"})
	if res, body := r.call("POST", "/v1/sessions/re-1/messages", tok, map[string]any{"text": "hello"}, "Idempotency-Key", "k1"); res.StatusCode != 202 {
		t.Fatalf("send: %d %s", res.StatusCode, body)
	}
	waitStatus(t, r, tok, "re-1", func(st nodeapi.Status) bool { return st.Turns == 1 })
	old := r.open("GET", "/v1/sessions/re-1/events?from=now", tok, nil)
	if f, err := old.next(); err != nil || f.event != "open" {
		t.Fatalf("open: %+v %v", f, err)
	}
	js, err := jetstream.New(r.srv.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(r.ctx, "LASH_LIVE"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.node.Streams().EnsureLive(r.ctx); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := old.next()
		if err != nil {
			t.Fatalf("the stream on the old LIVE ended without a word: %v", err)
		}
		if f.event == "reconnect" || f.event == "behind" {
			break
		}
	}
	got := r.open("POST", "/v1/ai-sdk/chat", tok, map[string]any{"id": "re-2", "messages": []any{uiUser("u1", "hi")}}).chunks(t, nil)
	if s := text(t, got); s != "Hello there, this answer streams in pieces." {
		t.Fatalf("an answer after LIVE was made anew: %v", got)
	}
}
