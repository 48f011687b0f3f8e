package console

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

// liveOnly serves the live routes from a real deployment's LIVE stream;
// it runs no lash-admin commands (cmd/lash-admin tests those, with the
// console in a browser).
type liveOnly struct{ c *streams.Client }

func (s liveOnly) Run(context.Context, []string, io.Writer) error {
	return errors.New("no commands here")
}

func (s liveOnly) Follow(ctx context.Context, session string, after uint64, fn func(live.Record) error) error {
	return live.Follow(ctx, s.c, session, after, fn)
}

func (s liveOnly) LiveTail(ctx context.Context) (uint64, error) {
	_, last, err := s.c.Bounds(ctx, streams.Live)
	return last, err
}

type sse struct {
	id, event, data string
}

// readEvents opens a live stream and reads n events from it.
func readEvents(t *testing.T, url, lastID string, n int) []sse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("%s: %d %s", url, res.StatusCode, ct)
	}
	var out []sse
	var cur sse
	sc := bufio.NewScanner(res.Body)
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		k, v, _ := strings.Cut(line, ": ")
		switch {
		case line == "":
			if cur.data != "" {
				if cur.event == "" {
					cur.event = "message"
				}
				out = append(out, cur)
			}
			cur = sse{}
		case k == "id":
			cur.id = v
		case k == "event":
			cur.event = v
		case k == "data":
			cur.data = v
		}
	}
	if len(out) < n {
		t.Fatalf("%s: %d events of %d: %v", url, len(out), n, sc.Err())
	}
	return out
}

// A page's live stream opens with its cursor, carries each event with
// its sequence as id, and a browser reconnecting with the last id gets
// what came after it, once; past the bound of streams, a page is told
// to come back.
func TestLiveStream(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	c, err := streams.Open(ctx, srv.Conn(t), streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := c.Subjects().Live("s1")
	publish := func(text string) uint64 {
		b, _ := json.Marshal(live.Event{V: live.Version, Type: live.TypeTextDelta, Session: "s1", Text: text})
		seq, _, err := c.Publish(ctx, streams.Publication{Subject: subj, Data: b})
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	publish("a")
	second := publish("b")
	ts := httptest.NewServer(Handler(liveOnly{c}, Options{}))
	t.Cleanup(ts.Close)

	all := readEvents(t, ts.URL+"/api/sessions/s1/live", "", 3)
	if all[0].event != "open" || all[0].id != "0" || all[1].id == "" || all[2].id != fmt.Sprint(second) {
		t.Fatalf("from the start: %+v", all)
	}
	var ev live.Event
	if err := json.Unmarshal([]byte(all[2].data), &ev); err != nil || ev.Text != "b" || ev.Type != live.TypeTextDelta {
		t.Fatalf("event: %+v %v", ev, err)
	}
	third := publish("c")
	back := readEvents(t, ts.URL+"/api/sessions/s1/live", all[2].id, 2)
	if back[0].event != "open" || back[0].id != all[2].id || back[1].id != fmt.Sprint(third) {
		t.Fatalf("after %s: %+v", all[2].id, back)
	}
	now := readEvents(t, ts.URL+"/api/sessions/s1/live?from=now", "", 1)
	if now[0].id != fmt.Sprint(third) {
		t.Fatalf("from now: %+v", now)
	}

	// One stream open (its open event read): a second is refused, not
	// queued.
	one := httptest.NewServer(Handler(liveOnly{c}, Options{MaxStreams: 1}))
	t.Cleanup(one.Close)
	hold, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(hold, "GET", one.URL+"/api/sessions/s1/live?from=now", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if line, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil || line != "retry: 1000\n" {
		t.Fatalf("the first stream: %q %v", line, err)
	}
	r2, err := http.Get(one.URL + "/api/sessions/s1/live")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusServiceUnavailable || r2.Header.Get("Retry-After") == "" {
		t.Fatalf("a second stream: %d", r2.StatusCode)
	}
	for _, bad := range []string{"/api/sessions/" + strings.Repeat("x", 4096) + "/live", "/api/sessions/s1/live?from=x"} {
		if r, err := http.Get(ts.URL + bad); err != nil || r.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: %v %v", bad, r.StatusCode, err)
		}
	}
	if r, err := http.Get(ts.URL + "/api/nope"); err != nil || r.StatusCode != http.StatusNotFound {
		t.Fatalf("/api/nope: %v", err)
	}
}

// recorder answers every command with the same JSON and keeps the command
// lines it was asked to run.
type recorder struct{ argv [][]string }

func (r *recorder) Run(_ context.Context, argv []string, w io.Writer) error {
	r.argv = append(r.argv, argv)
	_, err := io.WriteString(w, `{"transcript":[]}`)
	return err
}
func (r *recorder) Follow(context.Context, string, uint64, func(live.Record) error) error { return nil }
func (r *recorder) LiveTail(context.Context) (uint64, error)                              { return 0, nil }

// A page whose own name was re-pointed at the console's loopback address
// (DNS rebinding) is the console's origin to a browser: Host and Origin
// both name it. The console answers only its own hosts, so such a page
// neither reads nor decides; loopback hosts and the ones allowed are
// answered.
func TestOnlyTheConsolesHosts(t *testing.T) {
	src := &recorder{}
	h := Handler(src, Options{Hosts: []string{"console.internal"}})
	do := func(host, method, path, body string) int {
		req := httptest.NewRequest(method, "http://"+host+path, strings.NewReader(body))
		req.Host = host
		if method == http.MethodPost {
			req.Header.Set("Origin", "http://"+host)
			req.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	const decide = `{"call_id":"call_1","action":"approve","key":"k"}`
	for _, host := range []string{"rebind.attacker.example:7070", "rebind.attacker.example", "10.0.0.9:7070"} {
		if code := do(host, http.MethodPost, "/api/sessions/s1/decide", decide); code != http.StatusForbidden {
			t.Errorf("a decision for host %s: %d, want 403", host, code)
		}
		if code := do(host, http.MethodGet, "/api/sessions/s1/transcript", ""); code != http.StatusForbidden {
			t.Errorf("a transcript for host %s: %d, want 403", host, code)
		}
	}
	if len(src.argv) != 0 {
		t.Fatalf("commands ran for other hosts: %q", src.argv)
	}
	for _, host := range []string{"127.0.0.1:7070", "localhost:7070", "[::1]:7070", "console.internal:7070", "CONSOLE.internal"} {
		if code := do(host, http.MethodGet, "/api/sessions/s1/transcript", ""); code != http.StatusOK {
			t.Errorf("a transcript for host %s: %d, want 200", host, code)
		}
	}
	if code := do("127.0.0.1:7070", http.MethodPost, "/api/sessions/s1/decide", decide); code != http.StatusOK || len(src.argv) != 6 {
		t.Fatalf("a decision on loopback: %d, commands %q", code, src.argv)
	}
}
