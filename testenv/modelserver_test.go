package testenv_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
)

const serverScript = `
rule weather
  when user contains weather
  say Let me look.
  call get_weather {"city":"Oslo"}
rule late
  when tool contains booked
  say Booked.
rule flaky
  when user contains flaky
  fail 429 first 1 slow down
  say recovered
rule stuck
  when user contains hang
  hang
rule slow
  when user contains slow
  delay 30ms
  say finally
default
  say Hello there, friend.
`

// post sends a raw chat completion request and returns the status and body.
func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	res, err := http.Post(url+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

func TestModelServerCountsByHash(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(serverScript))
	hello := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	// The same content with other key order, spacing, sampling and streaming.
	helloAgain := `{ "messages": [ {"content": "hi", "role": "user"} ], "temperature": 0.5, "model": "m" }`
	other := `{"model":"m","messages":[{"role":"user","content":"hi!"}]}`

	for _, body := range []string{hello, helloAgain, other} {
		if status, b := post(t, s.URL(), body); status != http.StatusOK {
			t.Fatalf("status %d: %s", status, b)
		}
	}
	seen := s.Seen()
	if s.Requests() != 3 || len(seen) != 3 {
		t.Fatalf("Requests() = %d, Seen() has %d, want 3", s.Requests(), len(seen))
	}
	h1, h2, h3 := seen[0].Hash, seen[1].Hash, seen[2].Hash
	if h1 != h2 {
		t.Fatalf("the same request got two hashes: %s and %s", h1, h2)
	}
	if h3 == h1 {
		t.Fatalf("a different request got the same hash %s", h1)
	}
	if s.Count(h1) != 2 || s.Count(h3) != 1 || s.Count("nope") != 0 {
		t.Fatalf("counts: %d under %s, %d under %s", s.Count(h1), h1, s.Count(h3), h3)
	}
	if want := `model=m messages=1 tools=0 last=user:"hi"`; seen[0].Summary != want {
		t.Fatalf("summary %q, want %q", seen[0].Summary, want)
	}
	if seen[0].Rule != "default" || seen[0].Time.IsZero() {
		t.Fatalf("record %+v", seen[0])
	}

	s.Reset()
	if s.Requests() != 0 || s.Count(h1) != 0 || len(s.Seen()) != 0 {
		t.Fatal("Reset left requests behind")
	}
	post(t, s.URL(), hello)
	if s.Count(h1) != 1 {
		t.Fatalf("after Reset: count %d, want 1", s.Count(h1))
	}
}

func TestModelServerAnswers(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(serverScript))
	status, body := post(t, s.URL(), `{"model":"m","messages":[{"role":"user","content":"weather?"}]}`)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var cc struct {
		Object  string
		Choices []struct {
			Message struct {
				Content   *string
				ToolCalls []struct {
					ID       string
					Type     string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal(body, &cc); err != nil {
		t.Fatal(err)
	}
	ch := cc.Choices[0]
	if cc.Object != "chat.completion" || *ch.Message.Content != "Let me look." || ch.FinishReason != "tool_calls" ||
		len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].ID != "call_1" ||
		ch.Message.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` || cc.Usage.TotalTokens != 2+7 {
		t.Fatalf("answer %s", body)
	}
}

func TestModelServerStreams(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(serverScript))
	res, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var (
		text   strings.Builder
		finish string
		usage  bool
		done   bool
	)
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
			Usage *struct {
				TotalTokens int `json:"total_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if ch.Usage != nil {
			usage = ch.Usage.TotalTokens > 0 && len(ch.Choices) == 0
		}
	}
	if text.String() != "Hello there, friend." || finish != "stop" || !usage || !done {
		t.Fatalf("stream: text %q finish %q usage %v done %v", text.String(), finish, usage, done)
	}
	if seen := s.Seen(); len(seen) != 1 || !seen[0].Stream {
		t.Fatalf("seen %+v", seen)
	}
}

func TestModelServerFails(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(serverScript))
	flaky := `{"model":"m","messages":[{"role":"user","content":"flaky"}]}`
	status, body := post(t, s.URL(), flaky)
	var e struct {
		Error struct {
			Message string
			Type    string
			Code    *string
		}
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	if status != http.StatusTooManyRequests || e.Error.Message != "slow down" || e.Error.Type != "rate_limit_error" || e.Error.Code != nil {
		t.Fatalf("status %d body %s", status, body)
	}
	if status, body := post(t, s.URL(), flaky); status != http.StatusOK || !bytes.Contains(body, []byte("recovered")) {
		t.Fatalf("second try: status %d body %s", status, body)
	}
	if status, _ := post(t, s.URL(), `{"model":`); status != http.StatusBadRequest {
		t.Fatalf("bad JSON: status %d", status)
	}
	if status, _ := post(t, s.URL()+"/nowhere", `{}`); status != http.StatusNotFound {
		t.Fatalf("unknown path: status %d", status)
	}
	if s.Requests() != 3 { // the unknown path is not a chat completion
		t.Fatalf("Requests() = %d, want 3", s.Requests())
	}
}

func TestModelServerDelays(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(serverScript))
	start := time.Now()
	status, body := post(t, s.URL(), `{"model":"m","messages":[{"role":"user","content":"slow"}]}`)
	if status != http.StatusOK || !bytes.Contains(body, []byte("finally")) {
		t.Fatalf("status %d body %s", status, body)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("answered after %v, before the delay", d)
	}
}

// The server reads the conversation back as lash wrote it: a late result
// sent as a user message is a tool message again, named after its call.
func TestModelServerReadsLateResults(t *testing.T) {
	s := testenv.RunModelServer(t, scripted.MustParse(serverScript))
	status, body := post(t, s.URL(), `{"model":"m","messages":[
		{"role":"user","content":"book"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"b1","type":"function","function":{"name":"book","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"b1","content":"awaiting decision"},
		{"role":"user","content":"[late result for tool call b1 (book)]: booked, seat 12A"}]}`)
	if status != http.StatusOK || !bytes.Contains(body, []byte("Booked.")) {
		t.Fatalf("status %d body %s", status, body)
	}
	got := s.Seen()[0].Request.Messages[2:]
	want := []turn.Message{
		{Role: turn.RoleTool, CallID: "b1", Name: "book", Text: "awaiting decision"},
		{Role: turn.RoleTool, CallID: "b1", Name: "book", Text: "booked, seat 12A"},
	}
	for i := range want {
		if got[i].Role != want[i].Role || got[i].CallID != want[i].CallID || got[i].Name != want[i].Name || got[i].Text != want[i].Text {
			t.Fatalf("message %d: %+v, want %+v", i+2, got[i], want[i])
		}
	}
}

// Closing the server releases a hanging request instead of waiting for it.
func TestModelServerCloseReleasesHang(t *testing.T) {
	errc := make(chan error, 1)
	t.Run("server", func(t *testing.T) {
		s := testenv.RunModelServer(t, scripted.MustParse(serverScript))
		go func() {
			res, err := http.Post(s.URL()+"/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hang"}]}`))
			if err == nil {
				_, err = io.ReadAll(res.Body)
				res.Body.Close()
			}
			errc <- err
		}()
		testenv.WaitFor(t, 5*time.Second, func() error {
			if s.Requests() == 0 {
				return io.ErrNoProgress
			}
			return nil
		})
	}) // the server closes here
	select {
	case <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("the hanging request was not released when the server closed")
	}
}
