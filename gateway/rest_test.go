package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lash-run/lash/gateway"
	"github.com/lash-run/lash/live"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
)

// A session through the REST endpoints: created with its first message
// (the same key again is the same input, other content under it a 409),
// its status, transcript and listing.
func TestSessionLife(t *testing.T) {
	r := newRig(t)
	tok := token(t, gateway.Grant{SessionPrefix: "acme-", Decide: true})
	res, body := r.call("POST", "/v1/sessions", tok, map[string]any{"text": "hello"}, "Idempotency-Key", "first")
	var created gateway.Accepted
	if res.StatusCode != 201 || json.Unmarshal(body, &created) != nil || !strings.HasPrefix(created.Session, "acme-") || created.Duplicate {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	res, body = r.call("POST", "/v1/sessions", tok, map[string]any{"text": "hello"}, "Idempotency-Key", "first")
	var again gateway.Accepted
	if res.StatusCode != 201 || json.Unmarshal(body, &again) != nil || again != (gateway.Accepted{Session: created.Session, Seq: created.Seq, Duplicate: true}) {
		t.Fatalf("create again: %d %s", res.StatusCode, body)
	}
	sid := created.Session
	waitStatus(t, r, tok, sid, func(st nodeapi.Status) bool { return st.Turns == 1 && len(st.Pending) == 0 })
	res, body = r.call("POST", "/v1/sessions/"+sid+"/messages", tok, map[string]any{"text": "other"}, "Idempotency-Key", "first")
	if res.StatusCode != 409 || !strings.Contains(string(body), "first") {
		t.Fatalf("a used key with other content: %d %s", res.StatusCode, body)
	}
	res, body = r.call("GET", "/v1/sessions/"+sid+"/messages", tok, nil)
	var page nodeapi.TranscriptPage
	if res.StatusCode != 200 || json.Unmarshal(body, &page) != nil || len(page.Messages) != 2 ||
		page.Messages[0].Text != "hello" || !strings.HasPrefix(page.Messages[1].Text, "Hello there") || page.More {
		t.Fatalf("transcript: %d %s", res.StatusCode, body)
	}
	// A session of another prefix, made through the node API, is not listed.
	if _, err := r.client.Submit(r.ctx, nodeapi.SubmitRequest{Session: "other-1", Key: "k", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	res, body = r.call("GET", "/v1/sessions", tok, nil)
	var list nodeapi.SessionsPage
	if res.StatusCode != 200 || json.Unmarshal(body, &list) != nil || len(list.Sessions) != 1 || list.Sessions[0].Session != sid {
		t.Fatalf("list: %d %s", res.StatusCode, body)
	}
	res, body = r.call("GET", "/v1/openapi.json", "", nil)
	var doc map[string]any
	if res.StatusCode != 200 || json.Unmarshal(body, &doc) != nil || doc["openapi"] == nil {
		t.Fatalf("openapi: %d %.200s", res.StatusCode, body)
	}
}

func waitStatus(t *testing.T, r *rig, tok, sid string, ok func(nodeapi.Status) bool) nodeapi.Status {
	t.Helper()
	var st nodeapi.Status
	testenv.WaitFor(t, 10*time.Second, func() error {
		res, body := r.call("GET", "/v1/sessions/"+sid, tok, nil)
		st = nodeapi.Status{}
		if res.StatusCode != 200 || json.Unmarshal(body, &st) != nil || !ok(st) {
			return fmt.Errorf("status: %d %s", res.StatusCode, body)
		}
		return nil
	})
	return st
}

// lastSeqs are the streams' last sequences: what "no durable change"
// compares.
func (r *rig) lastSeqs() [3]uint64 {
	r.t.Helper()
	var out [3]uint64
	for i, s := range []streams.Stream{streams.Sessions, streams.Effects, streams.Live} {
		seq, err := r.node.Streams().LastSeq(r.ctx, s)
		if err != nil {
			r.t.Fatal(err)
		}
		out[i] = seq
	}
	return out
}

// A token for one tenant's sessions can neither read, stream, send to,
// decide for nor list another's; bad tokens get 401; foreign origins no
// CORS grant; oversize bodies 413; floods 429; and no refusal changes
// durable state.
func TestTenancy(t *testing.T) {
	r := newRig(t)
	owner := token(t, gateway.Grant{Sessions: []string{"b-1"}, Decide: true})
	if res, body := r.call("POST", "/v1/sessions", owner, map[string]any{"id": "b-1", "text": "deploy it"}, "Idempotency-Key", "k1"); res.StatusCode != 201 {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	waitStatus(t, r, owner, "b-1", func(st nodeapi.Status) bool { return st.Suspended == 1 && len(st.Pending) == 0 })
	st := waitStatus(t, r, owner, "b-1", func(st nodeapi.Status) bool { return len(st.SuspendedCalls) == 1 })
	if st.SuspendedCalls[0].Awaiting != "decision" || st.SuspendedCalls[0].Tool != "wait_for_approval" {
		t.Fatalf("suspended calls: %+v", st.SuspendedCalls)
	}
	callID := st.SuspendedCalls[0].CallID
	before := r.lastSeqs()

	other := token(t, gateway.Grant{SessionPrefix: "a-", Decide: true})
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/sessions/b-1"},
		{"GET", "/v1/sessions/b-1/messages"},
		{"GET", "/v1/sessions/b-1/events"},
		{"POST", "/v1/sessions/b-1/messages"},
		{"POST", "/v1/sessions/b-1/decisions"},
		{"POST", "/v1/sessions/b-1/stop"},
		{"GET", "/v1/ai-sdk/chat/b-1/stream"},
	} {
		res, body := r.call(c.method, c.path, other, map[string]any{"text": "x", "call_id": callID, "action": "resume", "turn": "in-1"}, "Idempotency-Key", "x")
		if res.StatusCode != 404 {
			t.Errorf("%s %s with another tenant's token: %d %s", c.method, c.path, res.StatusCode, body)
		}
	}
	res, body := r.call("POST", "/v1/ai-sdk/chat", other, map[string]any{"id": "b-1", "trigger": "submit-message",
		"messages": []any{map[string]any{"id": "m1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": "hi"}}}}})
	if res.StatusCode != 404 {
		t.Errorf("AI SDK chat with another tenant's token: %d %s", res.StatusCode, body)
	}
	res, body = r.call("POST", "/v1/ag-ui", other, map[string]any{"threadId": "b-1", "runId": "r1",
		"messages": []any{map[string]any{"id": "m1", "role": "user", "content": "hi"}}})
	if res.StatusCode != 404 {
		t.Errorf("AG-UI run with another tenant's token: %d %s", res.StatusCode, body)
	}
	res, body = r.call("POST", "/v1/sessions", other, map[string]any{"id": "b-1", "text": "hi"}, "Idempotency-Key", "x")
	if res.StatusCode != 403 {
		t.Errorf("create under another tenant's id: %d %s", res.StatusCode, body)
	}
	res, body = r.call("GET", "/v1/sessions", other, nil)
	if res.StatusCode != 200 || strings.Contains(string(body), "b-1") {
		t.Errorf("list with another tenant's token: %d %s", res.StatusCode, body)
	}
	// A token that names sessions lists those that exist.
	res, body = r.call("GET", "/v1/sessions", token(t, gateway.Grant{Sessions: []string{"nope", "b-1"}}), nil)
	var listed nodeapi.SessionsPage
	if err := json.Unmarshal(body, &listed); err != nil || res.StatusCode != 200 || len(listed.Sessions) != 1 || listed.Sessions[0].Session != "b-1" {
		t.Errorf("list by a token naming sessions: %d %s", res.StatusCode, body)
	}
	// A token that may not decide cannot, even for its own session.
	chatOnly := token(t, gateway.Grant{Sessions: []string{"b-1"}})
	res, body = r.call("POST", "/v1/sessions/b-1/decisions", chatOnly, map[string]any{"call_id": callID, "action": "resume"}, "Idempotency-Key", "d1")
	if res.StatusCode != 403 {
		t.Errorf("a decision without the right: %d %s", res.StatusCode, body)
	}

	bad := map[string]string{
		"expired":         token(t, gateway.Grant{Sessions: []string{"b-1"}}, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }),
		"wrong audience":  token(t, gateway.Grant{Sessions: []string{"b-1"}}, func(c jwt.MapClaims) { c["aud"] = "other" }),
		"no exp":          token(t, gateway.Grant{Sessions: []string{"b-1"}}, func(c jwt.MapClaims) { delete(c, "exp") }),
		"no lash claim":   token(t, gateway.Grant{}, func(c jwt.MapClaims) { delete(c, "lash") }),
		"malformed":       "not.a.token",
		"unsigned":        unsigned(t),
		"another's key":   foreignKey(t),
		"empty grant":     token(t, gateway.Grant{}),
		"bad session id":  token(t, gateway.Grant{Sessions: []string{"a.b"}}),
		"oversize header": strings.Repeat("x", gateway.MaxTokenBytes+1),
	}
	for name, tok := range bad {
		res, body := r.call("POST", "/v1/sessions/b-1/decisions", tok, map[string]any{"call_id": callID, "action": "resume"}, "Idempotency-Key", "d2")
		if res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") == "" || strings.Contains(string(body), tok) {
			t.Errorf("%s token: %d %s", name, res.StatusCode, body)
		}
	}
	if res, body := r.call("GET", "/v1/sessions/b-1", "", nil); res.StatusCode != 401 {
		t.Errorf("no token: %d %s", res.StatusCode, body)
	}
	// CORS: the configured origin is granted, another is not.
	for origin, granted := range map[string]bool{"https://app.example": true, "https://evil.example": false} {
		res, _ := r.call("OPTIONS", "/v1/sessions/b-1/messages", "", nil, "Origin", origin, "Access-Control-Request-Method", "POST")
		if got := res.Header.Get("Access-Control-Allow-Origin") == origin; got != granted {
			t.Errorf("preflight from %s: granted %v", origin, got)
		}
	}
	res, body = r.call("POST", "/v1/sessions/b-1/messages", owner, `{"text":"`+strings.Repeat("x", 2<<20)+`"}`, "Idempotency-Key", "big")
	if res.StatusCode != 413 {
		t.Errorf("an oversize body: %d %.200s", res.StatusCode, body)
	}
	if after := r.lastSeqs(); after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("refusals changed durable state: %v -> %v", before, after)
	}
}

// A flood gets 429 with Retry-After past the token's burst, and changes
// nothing; another token is served meanwhile.
func TestFlood(t *testing.T) {
	r := newRig(t, func(c *gateway.Config) { c.Rate, c.Burst = 1, 5 })
	flood := token(t, gateway.Grant{Sessions: []string{"f-1"}})
	limited := 0
	for i := range 20 {
		res, _ := r.call("POST", "/v1/sessions/f-1/messages", flood, map[string]any{"text": "hi"}, "Idempotency-Key", fmt.Sprint("k", i))
		if res.StatusCode == 429 && res.Header.Get("Retry-After") != "" {
			limited++
		}
	}
	if limited < 14 {
		t.Fatalf("20 requests at once against a burst of 5: %d refused", limited)
	}
	st, err := r.client.Status(r.ctx, "f-1")
	if err != nil || st.Inputs != 20-limited {
		t.Fatalf("inputs appended: %+v, %v; want %d", st, err, 20-limited)
	}
	calm := token(t, gateway.Grant{Sessions: []string{"f-1"}}, func(c jwt.MapClaims) { c["sub"] = "user-2" })
	if res, body := r.call("GET", "/v1/sessions/f-1", calm, nil); res.StatusCode != 200 {
		t.Fatalf("another token during the flood: %d %s", res.StatusCode, body)
	}
}

func unsigned(t *testing.T) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"aud": "lash", "exp": time.Now().Add(time.Hour).Unix(),
		"lash": map[string]any{"sessions": []string{"b-1"}, "decide": true}}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func foreignKey(t *testing.T) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"aud": "lash", "exp": time.Now().Add(time.Hour).Unix(),
		"lash": map[string]any{"sessions": []string{"b-1"}, "decide": true}}).SignedString([]byte("another secret of at least thirty-two bytes"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The events stream resumes from Last-Event-ID with every missed event
// once, in order, and from "now" with only what comes next.
func TestEventsResume(t *testing.T) {
	r := newRig(t)
	tok := token(t, gateway.Grant{Sessions: []string{"s1"}})
	// A stream from now sees the turn that follows.
	now := r.open("GET", "/v1/sessions/s1/events?from=now", tok, nil)
	if f, err := now.next(); err != nil || f.event != "open" {
		t.Fatalf("open: %+v %v", f, err)
	}
	if res, body := r.call("POST", "/v1/sessions/s1/messages", tok, map[string]any{"text": "tell it slowly"}, "Idempotency-Key", "m1"); res.StatusCode != 202 {
		t.Fatalf("send: %d %s", res.StatusCode, body)
	}
	var all []frame
	for {
		f, err := now.next()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, f)
		var ev live.Event
		if json.Unmarshal([]byte(f.data), &ev) == nil && ev.Type == live.TypeTurnCommitted {
			break
		}
	}
	now.close()
	deltas := 0
	for _, f := range all {
		if strings.Contains(f.data, `"text_delta"`) {
			deltas++
		}
	}
	if deltas < 5 {
		t.Fatalf("%d text deltas of a paced answer", deltas)
	}
	// Read a third, drop the connection, and resume after the last seen.
	first := r.open("GET", "/v1/sessions/s1/events", tok, nil)
	if f, _ := first.next(); f.event != "open" {
		t.Fatalf("open: %+v", f)
	}
	var got []frame
	for len(got) < len(all)/3 {
		f, err := first.next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	first.close()
	again := r.open("GET", "/v1/sessions/s1/events", tok, nil, "Last-Event-ID", got[len(got)-1].id)
	if f, _ := again.next(); f.event != "open" {
		t.Fatalf("open: %+v", f)
	}
	for len(got) < len(all) {
		f, err := again.next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	again.close()
	for i := range all {
		if got[i].id != all[i].id || got[i].data != all[i].data {
			t.Fatalf("event %d: %s %s, want %s %s", i, got[i].id, got[i].data, all[i].id, all[i].data)
		}
	}
}
