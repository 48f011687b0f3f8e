package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
)

// apiNode starts a lash-node serving the client API on a free port; it
// returns the node and the API's base URL.
func (d *deployment) apiNode(id, secretFile string, extra ...string) (*proc, string) {
	d.t.Helper()
	port := freePort(d.t.(*testing.T))
	p := d.startNode(id, append([]string{"--api", "127.0.0.1:" + port, "--api-hmac-secret-file", secretFile}, extra...)...)
	return p, "http://127.0.0.1:" + port
}

func apiToken(t *testing.T, secret string, grant map[string]any) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "e2e", "aud": "lash",
		"exp": time.Now().Add(time.Hour).Unix(), "lash": grant}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// post sends a JSON request to the API and returns the status and body.
func post(t *testing.T, url, tok string, body any, headers ...string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var sb strings.Builder
	_, _ = bufio.NewReader(res.Body).WriteTo(&sb)
	return res.StatusCode, sb.String()
}

// eventRecord is one event of a session's SSE stream.
type eventRecord struct {
	id string
	ev live.Event
}

// follow reads a session's event stream from the API at base after
// Last-Event-ID last ("" for all kept), handing each event to fn until fn
// says stop or the stream ends (an error: the reader reconnects).
func follow(t *testing.T, base, tok, session, last string, fn func(eventRecord) bool) (stopped bool, err error) {
	req, _ := http.NewRequest("GET", base+"/v1/sessions/"+session+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return false, fmt.Errorf("events: %d", res.StatusCode)
	}
	br := bufio.NewReader(res.Body)
	var id, event, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return false, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		case line == "" && data != "":
			if event == "" {
				var ev live.Event
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					t.Fatalf("event %s: %v", data, err)
				}
				if fn(eventRecord{id: id, ev: ev}) {
					return true, nil
				}
			}
			id, event, data = "", "", ""
		}
	}
}

const storyScript = `
rule story
  when user contains story
  pace 100ms
  say one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five twenty-six twenty-seven twenty-eight twenty-nine thirty

default
  say ok
`

// A client follows an answer through one node's API while the node
// running the turn is SIGKILLed: another node finishes the turn, and the
// client (reconnecting to another node's API with Last-Event-ID when its
// own died) receives every event once, in order, through the commit.
func TestStreamSurvivesNodeKill(t *testing.T) {
	models := testenv.RunModelServer(t, scripted.MustParse(storyScript))
	d := newDeployment(t)
	secret := "a secret of at least thirty-two bytes, for tests"
	secretFile := d.file("api-secret", secret)
	args := []string{"--openai-url", models.URL(), "--model", "m", "--base-url", models.URL()}
	a, apiA := d.apiNode("node-a", secretFile, args...)
	b, apiB := d.apiNode("node-b", secretFile, args...)
	tok := apiToken(t, secret, map[string]any{"sessions": []string{"s1"}})
	if code, body := post(t, apiA+"/v1/sessions/s1/messages", tok, map[string]any{"text": "a story"}, "Idempotency-Key", "m1"); code != 202 {
		t.Fatalf("send: %d %s", code, body)
	}
	var got []eventRecord
	killed, base := "", apiA
	for round := 0; ; round++ {
		if round > 5 {
			t.Fatalf("the stream never reached the commit: %d events", len(got))
		}
		last := ""
		if len(got) > 0 {
			last = got[len(got)-1].id
		}
		done, err := follow(t, base, tok, "s1", last, func(r eventRecord) bool {
			got = append(got, r)
			if killed == "" && r.ev.Type == live.TypeTextDelta && strings.Contains(r.ev.Text, "five") {
				killed, _, _ = strings.Cut(r.ev.Node, "/")
				victim := map[string]*proc{"node-a": a, "node-b": b}[killed]
				victim.kill()
				if killed == "node-a" {
					base = apiB // the client's API died with its node
				}
			}
			return r.ev.Type == live.TypeTurnCommitted
		})
		if done {
			break
		}
		t.Logf("stream ended (%v): reconnecting to %s after %d events", err, base, len(got))
	}
	if killed == "" {
		t.Fatal("no node was killed")
	}
	seen := map[string]bool{}
	prev := -1
	for _, r := range got {
		var n int
		fmt.Sscan(r.id, &n)
		if seen[r.id] || n <= prev {
			t.Fatalf("event %s again or out of order after %d", r.id, prev)
		}
		seen[r.id], prev = true, n
	}
	end := got[len(got)-1].ev
	if end.Termination != "natural-end" || strings.HasPrefix(end.Node, killed+"/") {
		t.Fatalf("the commit: %+v (killed %s)", end, killed)
	}
	// The answer the second node streamed completes the text.
	var last strings.Builder
	for _, r := range got {
		if r.ev.Type == live.TypeTextDelta && !strings.HasPrefix(r.ev.Node, killed+"/") {
			last.WriteString(r.ev.Text)
		}
	}
	if !strings.HasSuffix(last.String(), "twenty-nine thirty") {
		t.Fatalf("the finishing node's text: %q", last.String())
	}
}

const treeScript = `
rule child
  when user contains dig deep
  pace 200ms
  say digging one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty

rule spawn
  when user contains research
  when tools = 0
  call spawn_agent {"task":"dig deep","name":"digger"}

rule parent
  when user contains research
  pace 200ms
  say waiting one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty

default
  say ok
`

// A stop names its turn: it ends that turn and the sub-agents it spawned
// (the model server gets no request from either after it), and a stop of
// a turn already committed changes nothing in the next one. A client that
// only disconnects stops nothing.
func TestStopEndsTheTree(t *testing.T) {
	models := testenv.RunModelServer(t, scripted.MustParse(treeScript))
	d := newDeployment(t)
	secret := "a secret of at least thirty-two bytes, for tests"
	_, api := d.apiNode("node-a", d.file("api-secret", secret), "--model", "m", "--base-url", models.URL())
	tok := apiToken(t, secret, map[string]any{"sessions": []string{"s1"}})
	code, body := post(t, api+"/v1/sessions/s1/messages", tok, map[string]any{"text": "research it"}, "Idempotency-Key", "m1")
	if code != 202 {
		t.Fatalf("send: %d %s", code, body)
	}
	var sent struct{ Seq uint64 }
	_ = json.Unmarshal([]byte(body), &sent)
	turnID := fmt.Sprintf("in-%d", sent.Seq)
	// Both the parent and its sub-agent are answering (the parent's own
	// requests name the task too, in its call's arguments).
	childRequests := func(after time.Time) (n int) {
		for _, r := range models.Seen() {
			if r.Time.After(after) && r.Rule == "child" {
				n++
			}
		}
		return n
	}
	var parentTalking bool
	testenv.WaitFor(t, 30*time.Second, func() error {
		parentTalking = false
		for _, r := range models.Seen() {
			if r.Rule == "parent" {
				parentTalking = true
			}
		}
		if !parentTalking || childRequests(time.Time{}) == 0 {
			return fmt.Errorf("parent answering %v, child requests %d", parentTalking, childRequests(time.Time{}))
		}
		return nil
	})
	stopAt := time.Now()
	if code, body := post(t, api+"/v1/sessions/s1/stop", tok, map[string]any{"turn": turnID}); code != 202 {
		t.Fatalf("stop: %d %s", code, body)
	}
	var parent transcriptTurns
	testenv.WaitFor(t, 30*time.Second, func() error {
		if err := d.tryAdmin(&parent, "turns", "s1"); err != nil {
			return err
		}
		if len(parent.Turns) == 0 || parent.Turns[0].Termination.Reason != "cancelled" {
			return fmt.Errorf("parent turns %+v", parent.Turns)
		}
		return nil
	})
	var procs struct {
		Processes []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"processes"`
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if err := d.tryAdmin(&procs, "processes", "ls"); err != nil {
			return err
		}
		if len(procs.Processes) != 1 || procs.Processes[0].Status != "cancelled" {
			return fmt.Errorf("processes %+v", procs.Processes)
		}
		return nil
	})
	for _, r := range models.Seen() {
		if r.Time.After(stopAt) {
			t.Fatalf("a model request after the stop: %s (rule %s)", r.Summary, r.Rule)
		}
	}
	// A stop of the committed turn, then a message: the stop is stale.
	if code, body := post(t, api+"/v1/sessions/s1/stop", tok, map[string]any{"turn": turnID}, "Idempotency-Key", "late"); code != 202 {
		t.Fatalf("late stop: %d %s", code, body)
	}
	if code, body := post(t, api+"/v1/sessions/s1/messages", tok, map[string]any{"text": "hello"}, "Idempotency-Key", "m2"); code != 202 {
		t.Fatalf("send: %d %s", code, body)
	}
	d.waitAnswer("s1", "ok")
	if err := d.tryAdmin(&parent, "turns", "s1"); err != nil || parent.Turns[len(parent.Turns)-1].Termination.Reason != "natural-end" {
		t.Fatalf("the turn after a late stop: %+v, %v", parent.Turns, err)
	}
}

type transcriptTurns struct {
	Turns []struct {
		Turn        string `json:"turn"`
		Termination struct {
			Reason string `json:"reason"`
		} `json:"termination"`
	} `json:"turns"`
}
