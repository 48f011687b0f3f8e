package nodeapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/builtin"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

const approvalScript = `
rule ask
  when tools = 0
  call wait_for_approval {"request":"deploy to production"}

default
  say Deployed.
`

type requestLog struct {
	mu    sync.Mutex
	codes map[string]int // "endpoint code" -> count
}

func (r *requestLog) add(endpoint string, code int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.codes[fmt.Sprintf("%s %d", endpoint, code)]++
}

func (r *requestLog) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.codes[key]
}

func (r *requestLog) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.codes)
}

type apiRig struct {
	t      *testing.T
	ctx    context.Context
	srv    *testenv.Server
	node   *lash.Node
	server *nodeapi.Server
	client *nodeapi.Client
	logs   *testenv.Buffer
	reqs   *requestLog
}

func newAPIRig(t *testing.T, nodeID string, srv *testenv.Server) *apiRig {
	ctx := context.Background()
	if srv == nil {
		srv = testenv.RunJetStream(t)
	}
	reg := tools.New()
	if err := builtin.Register(reg, streams.DefaultPrefix, time.Now); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := lash.Open(ctx, lash.WithConn(srv.Conn(t)), lash.WithNodeID(nodeID),
		lash.WithModel(scripted.NewModel(scripted.MustParse(approvalScript))), lash.WithTools(reg),
		lash.WithMachine(turn.Config{Model: "scripted"}), lash.WithLogger(quiet),
		lash.WithProjection(t.TempDir()), lash.WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(ctx) })
	r := &apiRig{t: t, ctx: ctx, srv: srv, node: n, logs: &testenv.Buffer{}, reqs: &requestLog{codes: map[string]int{}}}
	r.server, err = nodeapi.Start(n, nodeapi.Config{Version: "1.2.3",
		Logger: slog.New(slog.NewTextHandler(r.logs, nil)), OnRequest: r.reqs.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.server.Stop() })
	r.client = nodeapi.NewClient(srv.Conn(t), "")
	return r
}

// lastSeqs is the last sequence of every stream: what "no durable change"
// compares.
func (r *apiRig) lastSeqs() [2]uint64 {
	r.t.Helper()
	var out [2]uint64
	for i, s := range []streams.Stream{streams.Sessions, streams.Effects} {
		seq, err := r.node.Streams().LastSeq(r.ctx, s)
		if err != nil {
			r.t.Fatal(err)
		}
		out[i] = seq
	}
	return out
}

// A session's life through the API: submit (idempotent), a turn that ends
// waiting for approval, status, a decision, the turn that finishes, and a
// cancel.
func TestEndpoints(t *testing.T) {
	r := newAPIRig(t, "node-a", nil)
	ctx := r.ctx
	acc, err := r.client.Submit(ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k1", Text: "Deploy it."})
	if err != nil || acc.Seq == 0 || acc.Duplicate {
		t.Fatalf("submit: %+v, %v", acc, err)
	}
	again, err := r.client.Submit(ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k1", Text: "Deploy it."})
	if err != nil || again.Seq != acc.Seq || !again.Duplicate {
		t.Fatalf("submit again: %+v, %v; want seq %d, duplicate", again, err, acc.Seq)
	}
	// The same key with other content is refused, naming the key.
	_, err = r.client.Submit(ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k1", Text: "Deploy something else."})
	if !errors.Is(err, nodeapi.ErrBusy) || !strings.Contains(err.Error(), `idempotency key "k1" was used by input`) {
		t.Fatalf("submit with a used key and other content: %v", err)
	}

	st, err := r.client.Status(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Inputs != 1 || st.Turns != 0 || st.RunStatus != "" || len(st.Pending) != 1 || st.Applied < acc.Seq {
		t.Errorf("status before the turn: %+v", st)
	}

	if _, err := r.node.Session("s1").Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = r.client.Status(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Turns != 1 || st.Suspended != 1 || st.Termination != turn.Suspended.String() || st.InputCursor != acc.Seq {
		t.Errorf("status after the first turn: %+v", st)
	}

	// A decision for a call the session does not hold is refused.
	_, err = r.client.Decide(ctx, nodeapi.DecideRequest{Session: "s1", Key: "d0", CallID: "call_9", Action: "resume"})
	if !errors.Is(err, nodeapi.ErrBadRequest) || !strings.Contains(err.Error(), "no suspended call") {
		t.Errorf("decide for an unknown call: %v", err)
	}
	dec, err := r.client.Decide(ctx, nodeapi.DecideRequest{Session: "s1", Key: "d1", CallID: "call_1", Action: "resume",
		Mode: "use-result", Payload: "approved by ops"})
	if err != nil || dec.Seq <= acc.Seq {
		t.Fatalf("decide: %+v, %v", dec, err)
	}
	if _, err := r.node.Session("s1").Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = r.client.Status(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Turns != 2 || st.Suspended != 0 || st.RunStatus != "done" || st.Termination != "natural-end" || st.Messages == 0 {
		t.Errorf("status after the decision: %+v", st)
	}

	c, err := r.client.Cancel(ctx, "s1", "c1")
	if err != nil || c.Seq <= dec.Seq {
		t.Fatalf("cancel: %+v, %v", c, err)
	}

	info, err := r.client.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := r.node.Owner()
	if info.Node != "node-a" || info.Incarnation != o.Incarnation || info.PID != o.PID || info.Host != o.Host ||
		info.Version != "1.2.3" || info.Prefix != "lash" || info.Running != 0 || info.Applied < st.Applied || info.Uptime <= 0 {
		t.Errorf("info: %+v", info)
	}
	// Once consumed, the key is recognised from the projection, forever.
	last, err := r.node.Streams().LastSeq(ctx, streams.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.node.Projection().WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	if again, err := r.client.Submit(ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k1", Text: "Deploy it."}); err != nil || again.Seq != acc.Seq || !again.Duplicate {
		t.Fatalf("submit a consumed key again: %+v, %v", again, err)
	}
	if now, _ := r.node.Streams().LastSeq(ctx, streams.Sessions); now != last {
		t.Fatalf("a consumed key was appended again")
	}
	// A request is counted once its answer is sent: the last one may be
	// counted a moment after its client read the answer.
	testenv.WaitFor(t, 10*time.Second, func() error {
		for _, key := range []string{"submit 200", "submit 409", "status 200", "decide 200", "decide 400", "cancel 200", "info 200"} {
			if r.reqs.count(key) == 0 {
				return fmt.Errorf("no request %q counted: %v", key, r.reqs.snapshot())
			}
		}
		return nil
	})
}

// Every kind of bad request is refused with its code and a one-line
// reason, is counted and logged at warn, and changes nothing durable.
func TestBadRequests(t *testing.T) {
	r := newAPIRig(t, "node-a", nil)
	if _, err := r.client.Submit(r.ctx, nodeapi.SubmitRequest{Session: "known", Key: "k1", Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", streams.DefaultMaxInputBytes)
	long := strings.Repeat("s", 10000)
	cases := []struct {
		name, endpoint, body string
		code                 int
		want                 string
	}{
		{"invalid JSON", "submit", `{"session":`, 400, "invalid JSON"},
		{"not JSON", "status", `hello`, 400, "invalid JSON"},
		{"not an object", "submit", `[1,2]`, 400, "want a JSON object"},
		{"trailing data", "status", `{"session":"known"} {}`, 400, "more data after"},
		{"empty body", "cancel", ``, 400, "empty request"},
		{"unknown field", "submit", `{"session":"known","key":"k","text":"x","colour":"red"}`, 400, `unknown field "colour"`},
		{"unknown field in a decision", "submit", `{"session":"known","key":"k","decisions":[{"id":"d","call_id":"c","action":"resume","why":1}]}`, 400, `unknown field "why"`},
		{"wrong type", "submit", `{"session":5,"key":"k","text":"x"}`, 400, "field session: want a string"},
		{"missing session and key", "submit", `{"text":"x"}`, 400, "missing fields: session; key"},
		{"missing input", "submit", `{"session":"known","key":"k"}`, 400, "missing field: text, decisions or cancel"},
		{"missing session", "status", `{}`, 400, "missing field: session"},
		{"missing call_id and action", "decide", `{"session":"known","key":"k"}`, 400, "missing fields: call_id; action"},
		{"missing key", "cancel", `{"session":"known"}`, 400, "missing field: key"},
		{"bad action", "decide", `{"session":"known","key":"k","call_id":"c","action":"maybe"}`, 400, "action must be resume or cancel"},
		{"bad action in submit", "submit", `{"session":"known","key":"k","decisions":[{"id":"d","call_id":"c","action":"maybe"}]}`, 400, "action must be resume or cancel"},
		{"no such suspended call", "decide", `{"session":"known","key":"k","call_id":"c","action":"cancel"}`, 400, `no suspended call "c"`},
		{"unknown session status", "status", `{"session":"nobody"}`, 404, `unknown session "nobody"`},
		{"unknown session decide", "decide", `{"session":"nobody","key":"k","call_id":"c","action":"resume"}`, 404, `unknown session "nobody"`},
		{"unknown session cancel", "cancel", `{"session":"nobody","key":"k"}`, 404, `unknown session "nobody"`},
		{"oversized text", "submit", `{"session":"known","key":"k","text":"` + big + `"}`, 413, "at most 262144"},
		{"oversized payload", "decide", `{"session":"known","key":"k","call_id":"c","action":"resume","mode":"use-result","payload":"` + big + `"}`, 413, "at most 262144"},
		{"oversized request", "submit", `{"session":"known","key":"k","text":"` + big + big + `"}`, 413, "at most 262144"},
		{"unknown field in info", "info", `{"verbose":true}`, 400, `unknown field "verbose"`},
		{"long session on submit", "submit", `{"session":"` + long + `","key":"k","text":"x"}`, 400, "id of 10000 bytes, at most 256"},
		{"long session on status", "status", `{"session":"` + long + `"}`, 400, "id of 10000 bytes, at most 256"},
		{"long session on cancel", "cancel", `{"session":"` + long + `","key":"k"}`, 400, "id of 10000 bytes, at most 256"},
		{"long key", "submit", `{"session":"known","key":"` + long + `","text":"x"}`, 400, "idempotency key: streams: invalid id: id of 10000 bytes"},
		{"no such agent", "submit", `{"session":"known","key":"k9","text":"x","agent":"nosuch"}`, 400, "no agent nosuch on the deployment"},
		{"agent name over the bound", "submit", `{"session":"known","key":"k9","text":"x","agent":"` + strings.Repeat("a", 65) + `"}`, 400, "1 to 64 bytes"},
		{"agent without a message", "submit", `{"session":"known","key":"k9","cancel":true,"agent":"a"}`, 400, "an agent is named with a message"},
	}
	before := r.lastSeqs()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.client.Do(r.ctx, c.endpoint, []byte(c.body))
			var e *nodeapi.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v, want *nodeapi.Error", err)
			}
			if e.Code != c.code || !strings.Contains(e.Description, c.want) || strings.Contains(e.Description, "\n") {
				t.Errorf("refused with %d %q, want %d and one line containing %q", e.Code, e.Description, c.code, c.want)
			}
			if e.Endpoint != c.endpoint {
				t.Errorf("error names endpoint %q", e.Endpoint)
			}
		})
	}
	if after := r.lastSeqs(); after != before {
		t.Errorf("bad requests changed the streams: last sequences %v, were %v", after, before)
	}
	for _, c := range cases {
		if r.reqs.count(fmt.Sprintf("%s %d", c.endpoint, c.code)) == 0 {
			t.Errorf("%s %d not counted", c.endpoint, c.code)
		}
	}
	logs := r.logs.String()
	if n := strings.Count(logs, "level=WARN msg=\"node API request refused\""); n != len(cases) {
		t.Errorf("%d refusals logged at warn, want %d:\n%s", n, len(cases), logs)
	}
	// info shows the newest refusals, each with its start.
	info, err := r.client.Info(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Refused) != len(cases) {
		t.Fatalf("info shows %d refusals, want %d", len(info.Refused), len(cases))
	}
	for i, c := range cases {
		got := info.Refused[i]
		want := c.body[:min(len(c.body), 1<<10)]
		if got.Endpoint != c.endpoint || got.Code != c.code || !strings.Contains(got.Reason, c.want) || string(got.Data) != want {
			t.Errorf("refusal %d: %+v, want %s %d %q", i, got, c.endpoint, c.code, c.want)
		}
	}
	// The sentinels match by code.
	_, err = r.client.Status(r.ctx, "nobody")
	if !errors.Is(err, nodeapi.ErrNotFound) || errors.Is(err, nodeapi.ErrBadRequest) {
		t.Errorf("status of an unknown session: %v", err)
	}
}

// status reads its own writes: a submit on one node is seen by the status
// of another node at once, as each waits for its projection to reach the
// stream's end.
func TestStatusReadsAcrossNodes(t *testing.T) {
	a := newAPIRig(t, "node-a", nil)
	b := newAPIRig(t, "node-b", a.srv)
	nodes, err := a.client.Nodes(a.ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		seen[n.Node] = true
	}
	if len(nodes) != 2 || !seen["node-a"] || !seen["node-b"] {
		t.Errorf("nodes: %+v", nodes)
	}
	// `nats micro ls` lists both nodes as instances of the lash service.
	nc := a.srv.Conn(t)
	infos := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe(nc.NewRespInbox(), infos)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.INFO."+nodeapi.ServiceName, sub.Subject, nil); err != nil {
		t.Fatal(err)
	}
	instances := map[string]bool{}
	for len(instances) < 2 {
		select {
		case m := <-infos:
			var info micro.Info
			if err := json.Unmarshal(m.Data, &info); err != nil {
				t.Fatal(err)
			}
			instances[info.Metadata["node"]] = info.Name == nodeapi.ServiceName && len(info.Endpoints) == 15+len(nodeapi.SessionEndpoints)
		case <-time.After(5 * time.Second):
			t.Fatalf("micro instances: %v", instances)
		}
	}
	if !instances["node-a"] || !instances["node-b"] {
		t.Errorf("micro instances: %v", instances)
	}
	for i := range 20 {
		sid := fmt.Sprintf("s%d", i)
		acc, err := a.client.Submit(a.ctx, nodeapi.SubmitRequest{Session: sid, Key: "k", Text: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []*nodeapi.Client{a.client, b.client} {
			st, err := c.Status(a.ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			if st.LastInput != acc.Seq {
				t.Fatalf("status of %s: last input %d, want %d", sid, st.LastInput, acc.Seq)
			}
		}
	}
}

// info counts the sessions whose lease the node holds; Stop waits for a
// request being handled and then answers nothing more.
func TestInfoRunningAndStop(t *testing.T) {
	r := newAPIRig(t, "node-a", nil)
	if _, err := r.client.Submit(r.ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k1", Text: "Deploy it."}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.node.Session("s1").Run(r.ctx); err != nil {
		t.Fatal(err)
	}
	// No lease is held once the run is over.
	if n, err := r.server.Running(r.ctx); err != nil || n != 0 {
		t.Errorf("running: %d, %v", n, err)
	}
	if r.server.ID() == "" {
		t.Error("no service id")
	}
	if err := r.server.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, 500*time.Millisecond)
	defer cancel()
	_, err := r.client.Info(ctx)
	// A request the draining subscription still takes is told to ask again.
	if !errors.Is(err, nodeapi.ErrNoNode) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nodeapi.ErrBusy) {
		t.Errorf("info after Stop: %v", err)
	}
}

// A node without a projection cannot serve the API.
func TestStartNeedsProjection(t *testing.T) {
	srv := testenv.RunJetStream(t)
	n, err := lash.Open(context.Background(), lash.WithConn(srv.Conn(t)),
		lash.WithModel(scripted.NewModel(scripted.MustParse(approvalScript))))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	if _, err := nodeapi.Start(n, nodeapi.Config{}); err == nil || !strings.Contains(err.Error(), "projection") {
		t.Errorf("Start: %v", err)
	}
}

// The client says when no node answers.
func TestNoNode(t *testing.T) {
	srv := testenv.RunJetStream(t)
	c := nodeapi.NewClient(srv.Conn(t), "other")
	if _, err := c.Submit(context.Background(), nodeapi.SubmitRequest{Session: "s", Key: "k", Text: "x"}); !errors.Is(err, nodeapi.ErrNoNode) {
		t.Errorf("submit: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Nodes(ctx); !errors.Is(err, nodeapi.ErrNoNode) {
		t.Errorf("nodes: %v", err)
	}
}

// On a session's own subjects the session is the subject's (a request
// naming another is refused) and submit takes a message only; nothing
// refused changes the streams.
func TestSessionSubjects(t *testing.T) {
	r := newAPIRig(t, "node-a", nil)
	if _, err := r.client.Submit(r.ctx, nodeapi.SubmitRequest{Session: "known", Key: "k1", Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	before := r.lastSeqs()
	onSession := []struct {
		name, subject, body string
		code                int
		want                string
	}{
		{"another session in the body", "lash.api.sess.known.submit", `{"session":"other","key":"k","text":"x"}`, 400, "names another session"},
		{"another session under a folded name", "lash.api.sess.known.submit", `{"\u017fession":"other","key":"k","text":"x"}`, 400, "the session goes as"},
		{"another session in capitals", "lash.api.sess.known.decide", `{"SESSION":"other","key":"d","call_id":"c","action":"cancel"}`, 400, "the session goes as"},
		{"a decision on session submit", "lash.api.sess.known.submit", `{"key":"k","decisions":[{"id":"d","call_id":"c","action":"resume"}]}`, 400, "decide and cancel endpoints"},
		{"a cancel on session submit", "lash.api.sess.known.submit", `{"key":"k","cancel":true}`, 400, "decide and cancel endpoints"},
		{"text with a cancel", "lash.api.submit", `{"session":"known","key":"k","text":"x","cancel":true}`, 400, "separate inputs"},
		{"a token that is not canonical", "lash.api.sess.=aGk.status", `{}`, 400, "names no session"},
		{"an unknown session from the subject", "lash.api.sess.nobody.status", ``, 404, `unknown session "nobody"`},
		{"not an object", "lash.api.sess.known.decide", `[1]`, 400, "want a JSON object"},
	}
	nc := r.node.Streams().Conn()
	for _, c := range onSession {
		t.Run(c.name, func(t *testing.T) {
			m, err := nc.Request(c.subject, []byte(c.body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			code, desc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
			if code != strconv.Itoa(c.code) || !strings.Contains(desc, c.want) {
				t.Errorf("answered %q %q, want %d and %q", code, desc, c.code, c.want)
			}
		})
	}
	if after := r.lastSeqs(); after != before {
		t.Errorf("bad requests changed the streams: last sequences %v, were %v", after, before)
	}
	// The session from the subject, the request without it.
	m, err := r.node.Streams().Conn().Request("lash.api.sess.known.submit", []byte(`{"key":"k2","text":"again"}`), 5*time.Second)
	var acc nodeapi.Accepted
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" || json.Unmarshal(m.Data, &acc) != nil || acc.Seq <= before[0] {
		t.Fatalf("submit on the session's subject: %v %q %v", err, m.Data, m.Header)
	}
	if st, err := r.client.Status(r.ctx, "known"); err != nil || st.Inputs != 2 {
		t.Fatalf("status: %+v, %v", st, err)
	}
}

// A client Via a server of its own process hands it requests without a
// trip through NATS, with the answers and refusals NATS would carry; once
// that server stops, it asks over NATS, where another node answers.
func TestClientVia(t *testing.T) {
	a := newAPIRig(t, "node-a", nil)
	b := newAPIRig(t, "node-b", a.srv)
	watch := a.srv.Conn(t)
	requests := make(chan *nats.Msg, 64)
	sub, err := watch.ChanSubscribe("lash.api.>", requests)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	local := nodeapi.NewClient(a.srv.Conn(t), "").Via(a.server)
	first, err := local.Submit(a.ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k1", Text: "Deploy it."})
	if err != nil {
		t.Fatal(err)
	}
	again, err := local.Submit(a.ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k1", Text: "Deploy it."})
	if err != nil || !again.Duplicate || again.Seq != first.Seq {
		t.Fatalf("the same key again: %+v, %v (first %+v)", again, err, first)
	}
	_, err = local.Submit(a.ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k2", Text: "x", Agent: "support@3"})
	var ne *nodeapi.Error
	if !errors.As(err, &ne) || ne.Code != nodeapi.CodeBadRequest || ne.Endpoint != nodeapi.EndpointSubmit {
		t.Fatalf("a pin on the session's submit: %v", err)
	}
	if a.reqs.count("submit 200") != 2 || a.reqs.count("submit 400") != 1 || b.reqs.count("submit 200") != 0 {
		t.Errorf("requests: a %v, b %v", a.reqs.snapshot(), b.reqs.snapshot())
	}
	info, err := local.Info(a.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Node != "node-a" || len(info.Refused) == 0 || !strings.Contains(info.Refused[len(info.Refused)-1].Reason, "pin") {
		t.Errorf("the refusal is not in node-a's info: %s %+v", info.Node, info.Refused)
	}
	// None went over NATS: a request would have reached the watcher
	// before the marker it publishes now.
	if err := watch.Publish("lash.api.marker", nil); err != nil {
		t.Fatal(err)
	}
	for m := range requests {
		if m.Subject == "lash.api.marker" {
			break
		}
		t.Errorf("a request over NATS: %s", m.Subject)
	}
	// A caller that gives up gets its context's error; the request runs
	// on under the server's timeout, as one over NATS does.
	if _, err := local.ProcessStart(a.ctx, nodeapi.ProcessStartRequest{ID: "ext", ExternalRef: "ci-1"}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(a.ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := local.ProcessAwait(short, "ext", time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await past the caller's deadline: %v", err)
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		if a.reqs.count("process_await 200") == 0 {
			return fmt.Errorf("the await did not run to its own end: %v", a.reqs.snapshot())
		}
		return nil
	})
	gone, cancel := context.WithCancel(a.ctx)
	cancel()
	if _, err := local.Status(gone, "s1"); !errors.Is(err, context.Canceled) || a.reqs.count("status 200") != 0 {
		t.Fatalf("a call with its context done: %v, %v", err, a.reqs.snapshot())
	}
	if n := a.reqs.count("process_await 500"); n != 0 {
		t.Errorf("the await failed on the node: %v", a.reqs.snapshot())
	}

	if err := a.server.Stop(); err != nil {
		t.Fatal(err)
	}
	// A's subscriptions drain a moment after Stop: what they still take
	// is told to ask again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := local.Submit(a.ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k3", Text: "Again."})
		if err == nil {
			break
		}
		if !errors.Is(err, nodeapi.ErrBusy) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if b.reqs.count("submit 200") != 1 {
		t.Errorf("after a's server stopped, node-b did not answer: b %v", b.reqs.snapshot())
	}
}

// sessions by ids answers those that exist, in the order named, in one
// request; ids go without prefix and after, and at most MaxPageLimit.
func TestSessionsByID(t *testing.T) {
	r := newAPIRig(t, "node-a", nil)
	for _, s := range []string{"s1", "s2"} {
		if _, err := r.client.Submit(r.ctx, nodeapi.SubmitRequest{Session: s, Key: "k", Text: "hello"}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := r.client.Sessions(r.ctx, nodeapi.SessionsRequest{IDs: []string{"s2", "nope", "s1"}})
	if err != nil || len(page.Sessions) != 2 || page.Sessions[0].Session != "s2" || page.Sessions[1].Session != "s1" {
		t.Fatalf("by ids: %+v, %v", page, err)
	}
	for _, req := range []nodeapi.SessionsRequest{{IDs: []string{"s1"}, Prefix: "s"}, {IDs: []string{"s1"}, Limit: 5}, {IDs: []string{"s1", "s1"}}} {
		if _, err := r.client.Sessions(r.ctx, req); !errors.Is(err, nodeapi.ErrBadRequest) {
			t.Errorf("%+v: %v", req, err)
		}
	}
	many := make([]string, nodeapi.MaxPageLimit+1)
	for i := range many {
		many[i] = fmt.Sprint("x", i)
	}
	if _, err := r.client.Sessions(r.ctx, nodeapi.SessionsRequest{IDs: many}); !errors.Is(err, nodeapi.ErrBadRequest) {
		t.Errorf("%d ids: %v", len(many), err)
	}
}
