package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/nodeapi"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// A real nats-server configured with the template lash-admin permissions
// prints: the node and lash-admin work, a client chats in its own session
// and reads its own live events, an approver decides its session's
// suspended call, and everything a hostile client tried on an open
// deployment is refused (forged log entries, journal records, inputs for
// another session, decisions by a client or for another session, signals,
// reading another session's inputs or live events or anyone's replies,
// the JetStream API, the node API's endpoints that name any session).
func TestPermissionsTemplate(t *testing.T) {
	bin := buildAdmin(t, t.TempDir())
	a := &admin{t: t, bin: bin, url: "nats://127.0.0.1:1", cache: t.TempDir()}
	conf := a.ok("permissions", "--sessions", "s1,s2", "--tools", "ledger_append", "--hooks", "guard")
	path := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	pw := map[string]string{"lash-node": "node-pw", "lash-admin": "admin-pw", "client-s1": "s1-pw", "client-s2": "s2-pw",
		"approver-s1": "a1-pw", "approver-s2": "a2-pw", "tool-ledger_append": "tool-pw", "hook-guard": "hook-pw"}
	for user, p := range pw {
		t.Setenv(envName(user), p)
	}
	parsed, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("the template does not load: %v\n%s", err, conf)
	}
	srv := testenv.RunJetStream(t, testenv.WithOptions(func(o *server.Options) { o.Users = parsed.Users }))
	var violations sync.Map
	connect := func(user string, extra ...nats.Option) *nats.Conn {
		opts := append([]nats.Option{nats.UserInfo(user, pw[user]), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			violations.Store(user+": "+err.Error(), true)
		})}, extra...)
		nc, err := nats.Connect(srv.URL(), opts...)
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}

	// The node, on its own inbox prefix.
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := lash.Open(ctx, lash.WithConn(connect("lash-node", nats.CustomInboxPrefix("_INBOX_lash"))), lash.WithNodeID("node-a"),
		lash.WithLogger(quiet), lash.WithModel(scripted.NewModel(scripted.MustParse(script))),
		lash.WithTools(registry(t)), lash.WithMachine(turn.Config{Model: "scripted", System: system}),
		lash.WithProjection(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	api, err := nodeapi.Start(n, nodeapi.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Stop() })
	sctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { n.Serve(sctx); close(served) }()
	t.Cleanup(func() { stop(); <-served })

	// The clients, each on its own inbox prefix: s1 watches its live events.
	user := func(name string) *nats.Conn { return connect(name, nats.CustomInboxPrefix(userInbox(name))) }
	s1, s2, a1, a2 := user("client-s1"), user("client-s2"), user("approver-s1"), user("approver-s2")
	live, err := s1.SubscribeSync("lash.live.s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		nc      *nats.Conn
		session string
		text    string
	}{{s1, "s1", "weather in Oslo?"}, {s2, "s2", "transfer 100 to bob"}} {
		js, err := jetstreamOf(c.nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish("lash.sess."+c.session+".in", []byte(`{"text":"`+c.text+`"}`), nats.MsgId(c.session+"-k1")); err != nil {
			t.Fatalf("client of %s appending its input: %v", c.session, err)
		}
	}
	ops := n.Streams()
	testenv.WaitFor(t, 20*time.Second, func() error {
		for _, s := range []string{"s1", "s2"} {
			if ts, err := lash.NewInspector(ops).Turns(ctx, s); err != nil || len(ts) != 1 {
				return errors.New("turns not committed yet")
			}
		}
		return nil
	})
	if m, err := live.NextMsg(5 * time.Second); err != nil || !strings.Contains(string(m.Data), "turn") {
		t.Fatalf("s1's client reading its live events: %v", err)
	}
	// It reads them from a cursor through the node API, and so does its
	// approver; another session's are refused.
	page, err := nodeapi.NewClient(s1, "lash").Live(ctx, "s1", 0, 0)
	if err != nil || len(page.Records) == 0 {
		t.Fatalf("s1's client reading its live events from a cursor: %+v, %v", page, err)
	}
	after := page.Records[0].Seq
	if next, err := nodeapi.NewClient(s1, "lash").Live(ctx, "s1", after, 1); err != nil || len(next.Records) != 1 || next.Records[0].Seq <= after {
		t.Fatalf("s1's client reading after %d: %+v, %v", after, next, err)
	}
	if _, err := nodeapi.NewClient(a1, "lash").Live(ctx, "s1", 0, 0); err != nil {
		t.Fatalf("s1's approver reading s1's live events: %v", err)
	}
	denied, cancelDenied := context.WithTimeout(ctx, time.Second)
	defer cancelDenied()
	if _, err := nodeapi.NewClient(s1, "lash").Live(denied, "s2", 0, 0); err == nil {
		t.Fatal("s1's client read s2's live events")
	}
	// No client gets the JetStream API: not one consumer on LIVE.
	if _, err := s1.Request("$JS.API.CONSUMER.CREATE.LASH_LIVE.mine.lash.live.s1", []byte(`{"stream_name":"LASH_LIVE","config":{"name":"mine","filter_subject":"lash.live.s1"}}`), time.Second); err == nil {
		t.Fatal("s1's client created a consumer on the LIVE stream")
	}
	// A node API request whose answer would land in another session's
	// inputs is refused, and nothing lands there.
	ins, err := ops.Conn().SubscribeSync("lash.sess.s2.in")
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.PublishRequest("lash.api.sess.s1.status", "lash.sess.s2.in", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := s1.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		info, err := nodeapi.NewClient(ops.Conn(), "lash").Info(ctx)
		if err != nil {
			return err
		}
		for _, r := range info.Refused {
			if strings.Contains(r.Reason, "reply subject lash.sess.s2.in") {
				return nil
			}
		}
		return errors.New("the request answered into s2's inputs is not refused yet")
	})
	if m, err := ins.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("an answer landed in s2's inputs: %s", m.Data)
	}
	_ = ins.Unsubscribe()

	// The client of s1 through the node API on its session's subjects.
	if acc, err := nodeapi.NewClient(s1, "lash").Submit(ctx, nodeapi.SubmitRequest{Session: "s1", Key: "k2", Text: "weather again?"}); err != nil || acc.Seq == 0 {
		t.Fatalf("s1's client submitting through the node API: %+v, %v", acc, err)
	}
	if st, err := nodeapi.NewClient(s1, "lash").Status(ctx, "s1"); err != nil || st.Session != "s1" {
		t.Fatalf("s1's client asking its status: %+v, %v", st, err)
	}

	// What hostile clients try: none of it lands.
	heads := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, st := range []streams.Stream{streams.Sessions, streams.Effects, streams.Triggers} {
			seq, err := ops.LastSeq(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			out[ops.StreamName(st)] = seq
		}
		return out
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		if ts, err := lash.NewInspector(ops).Turns(ctx, "s1"); err != nil || len(ts) != 2 {
			return errors.New("s1's second turn not committed yet")
		}
		return nil
	})
	before := heads()
	decision := []byte(`{"decisions":[{"id":"d","call_id":"call_1","action":"resume"}]}`)
	forged := map[*nats.Conn][]string{
		s1: {
			"lash.sess.s2.ev",                    // a forged commit
			"lash.sess.s1.ev",                    // a forged fence on its own session
			"lash.fx.s2.in-9.2._.r",              // a journal record for a turn to come
			"lash.sess.s2.in",                    // an input for another session
			"lash.sess.s1.decide",                // a decision: a client chats, it does not approve
			"lash.signal.deploy.42",              // a signal
			"lash.trig.sub.sub-x",                // a trigger subscription
			"$JS.API.STREAM.PURGE.LASH_SESSIONS", // the JetStream API
		},
		s2: {"lash.sess.s2.decide"},                    // its own session's call: not a client's to approve
		a1: {"lash.sess.s2.decide", "lash.sess.s1.in"}, // another session's call; chatting
	}
	for nc, subjects := range forged {
		for _, subj := range subjects {
			if err := nc.Publish(subj, decision); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for _, subj := range []string{"lash.sess.s2.in", "lash.live.s2", "lash.sess.s2.ev", "_INBOX_lash.>", "_INBOX.>", "_INBOX_client-s2.>"} {
		if _, err := s1.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
	}
	if err := s1.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Request("$JS.API.STREAM.MSG.GET.LASH_SESSIONS", []byte(`{"last_by_subj":"lash.sess.s2.in"}`), time.Second); err == nil {
		t.Fatal("s1's client read another session's input through the JetStream API")
	}
	// The node API: decisions need the approver's endpoint, another
	// session's endpoints and those naming any session are out of reach.
	refused := func(who string, call func(context.Context) error) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := call(rctx); err == nil {
			t.Fatalf("%s: the node API took it", who)
		}
	}
	d := nodeapi.DecideRequest{Session: "s2", Key: "d1", CallID: "call_1", Action: "resume", Mode: "use-result", Payload: "sent"}
	refused("s2's client deciding", func(c context.Context) error { _, err := nodeapi.NewClient(s2, "lash").Decide(c, d); return err })
	refused("s1's approver deciding for s2", func(c context.Context) error { _, err := nodeapi.NewClient(a1, "lash").Decide(c, d); return err })
	refused("s1's client submitting to s2", func(c context.Context) error {
		_, err := nodeapi.NewClient(s1, "lash").Submit(c, nodeapi.SubmitRequest{Session: "s2", Key: "x", Text: "hi"})
		return err
	})
	refused("s1's client on the endpoint for any session", func(c context.Context) error {
		_, err := nodeapi.NewClient(s1, "lash").Do(c, nodeapi.EndpointSubmit, []byte(`{"session":"s1","key":"y","text":"hi"}`))
		return err
	})
	refused("s2's client cancelling", func(c context.Context) error {
		_, err := nodeapi.NewClient(s2, "lash").Cancel(c, "s2", "c1")
		return err
	})
	if after := heads(); !mapsEqual(before, after) {
		t.Fatalf("hostile clients' publishes were stored: before %v, after %v", before, after)
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		n := 0
		violations.Range(func(k, _ any) bool {
			if strings.Contains(strings.ToLower(k.(string)), "permissions violation") {
				n++
			}
			return true
		})
		if n < 6 {
			return errors.New("the refused subscriptions are not all reported yet")
		}
		return nil
	})

	// s2's approver decides its suspended call: the turn goes on.
	if acc, err := nodeapi.NewClient(a2, "lash").Decide(ctx, d); err != nil || acc.Seq == 0 {
		t.Fatalf("s2's approver deciding: %+v, %v", acc, err)
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		ts, err := lash.NewInspector(ops).Turns(ctx, "s2")
		if err != nil || len(ts) != 2 || ts[1].Suspended != 0 {
			return fmt.Errorf("s2's decided turn not committed yet: %+v %v", ts, err)
		}
		return nil
	})

	// A tool server, as its role allows: nodes find its tool and call it.
	ledger, err := natstool.Serve(connect("tool-ledger_append"), "lash", micro.Config{Name: "ledger", Version: "1.0.0"}, natstool.Served{
		Name: "ledger_append", Description: "append to the ledger", Schema: []byte(`{"type":"object"}`),
		Handle: func(context.Context, natstool.Request) (string, error) { return "appended", nil },
	})
	if err != nil {
		t.Fatalf("the tool server: %v", err)
	}
	defer ledger.Stop()
	found, err := natstool.Discover(ctx, connect("lash-node", nats.CustomInboxPrefix("_INBOX_lash")), "lash")
	if err != nil || len(found) != 1 {
		t.Fatalf("nodes discovering the tool: %d tools, %v", len(found), err)
	}
	if out, err := found[0].Call(ctx, []byte(`{}`)); err != nil || out.Output != "appended" {
		t.Fatalf("a node calling the tool: %q, %v", out, err)
	}
	// It may ask the node API for its calls' durable work: a forged
	// ticket is refused by the node, not by the server.
	toolConn := connect("tool-ledger_append", nats.CustomInboxPrefix("_INBOX_tool-ledger_append"))
	var apiErr *nodeapi.Error
	if _, err := nodeapi.NewClient(toolConn, "lash").Step(ctx, "ct1.czE.Y2FsbA.bWFj", "s", nil); !errors.As(err, &apiErr) || apiErr.Code != nodeapi.CodeBadRequest {
		t.Fatalf("a tool server's step request: %v", err)
	}
	// A hook server answers the questions nodes ask on its subject.
	hook := connect("hook-guard")
	if _, err := hook.Subscribe("lash.hook.guard", func(m *nats.Msg) { _ = m.Respond([]byte(`{"verdict":"allow"}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := hook.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := connect("lash-node", nats.CustomInboxPrefix("_INBOX_lash")).Request("lash.hook.guard", []byte(`{}`), 5*time.Second); err != nil || string(m.Data) != `{"verdict":"allow"}` {
		t.Fatalf("a node asking the hook: %v", err)
	}

	// lash-admin, as the operator.
	op := &admin{t: t, bin: bin, url: srv.URL(), cache: t.TempDir()}
	out := op.ok("--user", "lash-admin", "--password", pw["lash-admin"], "--inbox-prefix", "_INBOX_lash", "sessions", "ls")
	if !strings.Contains(out, "s1") || !strings.Contains(out, "s2") {
		t.Fatalf("lash-admin sessions ls:\n%s", out)
	}
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func jetstreamOf(nc *nats.Conn) (nats.JetStreamContext, error) { return nc.JetStream() }

// Clients and approvers get no JetStream API (a pull's deliveries go to
// whatever reply subject the puller names): they read missed live events
// through the node API.
func TestPermissionsNoJetStreamForClients(t *testing.T) {
	users, err := permissionUsers("lash", permFlags{sessions: "s1", nodeInbox: "_INBOX_lash"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if u.name != "client-s1" && u.name != "approver-s1" {
			continue
		}
		js := slices.ContainsFunc(u.pub, func(s string) bool { return strings.HasPrefix(s, "$JS.") })
		if js || !slices.Contains(u.pub, "lash.api.sess.s1.live") || !slices.Contains(u.sub, "lash.live.s1") {
			t.Fatalf("%s publishes %v, subscribes %v", u.name, u.pub, u.sub)
		}
	}
}
