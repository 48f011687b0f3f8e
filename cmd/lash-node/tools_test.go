package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats.go/micro"
)

// serveTool serves a tool on its own connection and returns what stops
// it; both return once the server knows.
func serveTool(t *testing.T, srv *testenv.Server, service, name, description string) (stop func()) {
	t.Helper()
	nc := srv.Conn(t)
	svc, err := natstool.Serve(nc, "", micro.Config{Name: service, Version: "1.0.0"}, natstool.Served{
		Name: name, Description: description, Schema: []byte(`{"type":"object"}`),
		Handle: func(context.Context, natstool.Request) (string, error) { return "ok", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := svc.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

func names(ts *toolSet) []string {
	var out []string
	for _, s := range ts.reg.Specs() {
		out = append(out, s.Name)
	}
	return out
}

// Discovery keeps the registry in step with the tools served over NATS:
// new ones are added, changed ones replaced, vanished ones removed; bad
// endpoints and names of built-in tools are left out and logged once.
func TestToolSync(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	logs := &testenv.Buffer{}
	problems := 0
	ts, err := newToolSet(srv.Conn(t), "lash", slog.New(slog.NewTextHandler(logs, nil)), func() { problems++ })
	if err != nil {
		t.Fatal(err)
	}
	builtins := []string{"sleep", "wait_for_approval", "wait_for_signal"}
	if got := names(ts); !slices.Equal(got, builtins) {
		t.Fatalf("built-in tools %q", got)
	}

	ledger := serveTool(t, srv, "ledger", "ledger_append", "append to the ledger")
	serveTool(t, srv, "impostor", "sleep", "not the real sleep")
	// An endpoint under the tool prefix without the contract's metadata.
	bnc := srv.Conn(t)
	broken, err := micro.AddService(bnc, micro.Config{Name: "broken", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer broken.Stop()
	if err := broken.AddEndpoint("broken", micro.HandlerFunc(func(r micro.Request) { r.Respond(nil) }),
		micro.WithEndpointSubject("lash.tool.broken")); err != nil {
		t.Fatal(err)
	}
	if err := bnc.Flush(); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if err := ts.sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := names(ts); !slices.Equal(got, []string{"ledger_append", "sleep", "wait_for_approval", "wait_for_signal"}) {
			t.Fatalf("tools %q", got)
		}
		if problems != 2 {
			t.Errorf("%d problems counted, want 2 (the broken endpoint and the impostor), once each", problems)
		}
	}
	if tool, _ := ts.reg.Get("sleep"); strings.Contains(tool.Spec().Description, "not the real") {
		t.Error("a tool served over NATS replaced a built-in one")
	}

	// The same name with another description replaces the tool.
	ledger()
	serveTool(t, srv, "ledger", "ledger_append", "append an entry to the ledger")
	if err := ts.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if tool, ok := ts.reg.Get("ledger_append"); !ok || tool.Spec().Description != "append an entry to the ledger" {
		t.Errorf("changed tool not replaced")
	}
	if !strings.Contains(logs.String(), "msg=\"tool changed\" tool=ledger_append") {
		t.Errorf("logs:\n%s", logs)
	}

	// Problems gone and then back are logged again.
	if err := broken.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := bnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ts.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if problems != 2 {
		t.Errorf("%d problems counted", problems)
	}
	if n := strings.Count(logs.String(), "tool endpoint left out"); n != 2 {
		t.Errorf("%d problems logged, want 2:\n%s", n, logs)
	}
}

// A tool whose service stops stays registered (a call waits for a server)
// until goneAfter syncs in a row have missed it.
func TestToolSyncRemoves(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	logs := &testenv.Buffer{}
	ts, err := newToolSet(srv.Conn(t), "lash", slog.New(slog.NewTextHandler(logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := serveTool(t, srv, "ledger", "ledger_append", "append to the ledger")
	// A service of our own answers too, so discovery does not wait for
	// its deadline once the ledger is gone.
	serveTool(t, srv, "other", "other_tool", "another tool")
	if err := ts.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if ts.count() != 5 {
		t.Fatalf("tools %q", names(ts))
	}
	svc()
	for i := range goneAfter {
		if got := names(ts); !slices.Contains(got, "ledger_append") {
			t.Fatalf("after %d syncs without it: tools %q", i, got)
		}
		if err := ts.sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := names(ts); slices.Contains(got, "ledger_append") || !slices.Contains(got, "other_tool") {
		t.Errorf("tools %q", got)
	}
	if !strings.Contains(logs.String(), "msg=\"tool gone\" tool=ledger_append") {
		t.Errorf("logs:\n%s", logs)
	}
	// Gone is not proof (a slow link drops answers too): a call to it
	// waits a while for it to come back instead of failing as unknown.
	if !ts.settling(time.Now()) {
		t.Fatal("no window opened when the tool went")
	}
	got := make(chan turn.ToolResult, 1)
	go func() {
		call := turn.PendingCall{Call: turn.ToolCall{ID: "c1", Name: "ledger_append", Arguments: `{}`},
			Key: turn.ReplayKey{Session: "s1", Turn: "t1", Kind: turn.KindToolCall, Effect: 1, Call: "c1"}}
		res, _ := tools.NewRunner(ts.reg).Invoke(context.Background(), call, 1, false)
		got <- res
	}()
	serveTool(t, srv, "ledger", "ledger_append", "append to the ledger")
	if err := ts.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if res := <-got; res.Status != turn.ToolOK {
		t.Fatalf("a call to a tool back after a miss: %+v", res)
	}
}

// A tool whose servers come to disagree (a rolling deploy) keeps the
// definition it had until they agree again.
func TestToolSyncKeepsConflicted(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ctx := context.Background()
	ts, err := newToolSet(srv.Conn(t), "lash", slog.New(slog.NewTextHandler(&testenv.Buffer{}, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	serveTool(t, srv, "ledger-v1", "ledger_append", "append to the ledger")
	if err := ts.sync(ctx); err != nil {
		t.Fatal(err)
	}
	serveTool(t, srv, "ledger-v2", "ledger_append", "append to the ledger, v2")
	for range goneAfter + 1 {
		if err := ts.sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tool, ok := ts.reg.Get("ledger_append")
	if !ok || tool.Spec().Description != "append to the ledger" {
		t.Fatalf("ledger_append after the conflict: %v %+v", ok, tool)
	}
}

// After a start, a tool served over NATS may still be on its way back:
// the registry settles only once a discovery begun after the window found
// what there is. Meanwhile a call to a tool not found yet waits for it,
// and a refresh finds it soon; a reconnect opens the window again.
func TestToolSetSettles(t *testing.T) {
	srv := testenv.RunJetStream(t)
	ts, err := newToolSet(srv.Conn(t), "lash", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := tools.NewRunner(ts.reg)
	call := turn.PendingCall{Call: turn.ToolCall{ID: "c1", Name: "ledger_append", Arguments: `{}`},
		Key: turn.ReplayKey{Session: "s1", Turn: "t1", Kind: turn.KindToolCall, Effect: 1, Call: "c1"}}
	type result struct {
		res turn.ToolResult
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := r.Invoke(context.Background(), call, 2, true)
		got <- result{res, err}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	reconnected := make(chan struct{}, 1)
	stopped := make(chan struct{})
	go func() { defer close(stopped); ts.refresh(ctx, time.Hour, reconnected) }()
	defer func() { cancel(); <-stopped }()
	serveTool(t, srv, "ledger", "ledger_append", "append to the ledger") // its server comes back
	if g := <-got; g.err != nil || g.res.Status != turn.ToolOK || g.res.Output != "ok" {
		t.Fatalf("a call resumed before its tool was found: %+v, %v", g.res, g.err)
	}
	if !ts.settling(time.Now()) {
		t.Fatal("the window closed before its time")
	}
	// Once a discovery begun after the window is done, the registry has
	// settled: a tool no server has is unknown at once.
	ts.mu.Lock()
	ts.settleEnd = time.Now()
	ts.mu.Unlock()
	testenv.WaitFor(t, 10*time.Second, func() error {
		ts.mu.Lock()
		open := !ts.settleEnd.IsZero()
		ts.mu.Unlock()
		if open {
			return errors.New("not settled yet")
		}
		return nil
	})
	gone := call
	gone.Call.Name = "nobody_serves"
	if res, err := r.Invoke(context.Background(), gone, 1, false); err != nil || !strings.Contains(res.Output, "unknown tool") {
		t.Fatalf("a call to a tool nobody serves, settled: %+v, %v", res, err)
	}
	reconnected <- struct{}{}
	testenv.WaitFor(t, 10*time.Second, func() error {
		if !ts.settling(time.Now()) {
			return errors.New("a reconnect did not open the window")
		}
		return nil
	})
}
