package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash"
	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/streams"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/turn"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// /healthz says 200 while the node is connected and its projection folds
// the stream, and 503 with the reason otherwise.
func TestHealth(t *testing.T) {
	defer func(d time.Duration) { healthWait = d }(healthWait)
	healthWait = 200 * time.Millisecond
	srv := testenv.RunJetStream(t)
	nc := srv.Conn(t)
	ctx := context.Background()
	node, err := lash.Open(ctx, lash.WithConn(nc), lash.WithProjection(t.TempDir()),
		lash.WithModel(scripted.NewModel(scripted.MustParse(okScript))),
		lash.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	h := &health{nc: nc, node: node}
	m := newMetrics()
	srvHTTP, addr, err := serveHTTP("127.0.0.1:0", h, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srvHTTP.Close()
	base := "http://" + addr.String()
	expect := func(code int, body string) {
		t.Helper()
		got, text := get(t, base+"/healthz")
		if got != code || !strings.Contains(text, body) {
			t.Errorf("/healthz: %d %q, want %d %q", got, text, code, body)
		}
	}
	if _, _, err := node.Session("s1").Send(ctx, "k1", lash.Input{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	expect(200, "ok")
	h.draining.Store(true)
	expect(503, "draining")
	h.draining.Store(false)

	// Once the projection stops, a message it does not fold shows.
	if err := node.Close(ctx); err != nil {
		t.Fatal(err)
	}
	subj, _ := node.Streams().Subjects().SessionInputs("s2")
	if _, _, err := node.Streams().Publish(ctx, streams.Publication{Subject: subj, Data: []byte(`{"text":"hi"}`), MsgID: "x"}); err != nil {
		t.Fatal(err)
	}
	expect(503, "projection is not running: it folded through 1, the stream holds 2")
	nc.Close()
	expect(503, "not connected to NATS (CLOSED)")

	if got, _ := get(t, base+"/metrics"); got != 200 {
		t.Errorf("/metrics: %d", got)
	}
	if got, _ := get(t, base+"/nothing"); got != 404 {
		t.Errorf("/nothing: %d", got)
	}
}

// A node whose session runs keep failing, here on a store that refuses
// writes, is degraded; it recovers with the next run that succeeds.
func TestHealthDegradedOnFullStore(t *testing.T) {
	defer func(d time.Duration) { healthWait = d }(healthWait)
	healthWait = time.Second
	srv := testenv.RunJetStream(t, testenv.WithOptions(func(o *server.Options) { o.JetStreamMaxStore = 8 << 20 }))
	nc := srv.Conn(t)
	ctx := context.Background()
	node, err := lash.Open(ctx, lash.WithConn(nc), lash.WithProjection(t.TempDir()),
		lash.WithModel(scripted.NewModel(scripted.MustParse(okScript))),
		lash.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close(ctx)
	h := &health{nc: nc, node: node}
	for i := range 4 {
		if _, _, err := node.Session(fmt.Sprint("s", i)).Send(ctx, "k1", lash.Input{Text: "hi"}); err != nil {
			t.Fatal(err)
		}
	}
	// Fill the store.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	fill, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 256<<10)
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "fill", chunk); err != nil {
			break
		}
		if i > 100 {
			t.Fatal("the store never filled")
		}
	}
	if err := h.check(ctx); err != nil {
		t.Fatalf("healthy before any run failed: %v", err)
	}
	for i := range 3 {
		if _, err := node.Session(fmt.Sprint("s", i)).Run(ctx); err == nil {
			t.Fatalf("a run on a full store succeeded")
		}
	}
	if err := h.check(ctx); err == nil || !strings.Contains(err.Error(), "degraded: the last 3 session runs failed") {
		t.Fatalf("health on a full store: %v", err)
	}
	if err := fill.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Session("s3").Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.check(ctx); err != nil {
		t.Fatalf("health after a run succeeded: %v", err)
	}
}

// The node's events feed the metrics.
func TestMetricsFromEvents(t *testing.T) {
	m := newMetrics()
	for _, ev := range []lash.Event{
		{Kind: lash.EventLeaseClaimed}, {Kind: lash.EventEffectExecuted, Effect: "llm-call", Took: 30 * time.Millisecond},
		{Kind: lash.EventEffectReplayed, Effect: "tool-calls"}, {Kind: lash.EventTurnCommitted, Took: time.Second},
		{Kind: lash.EventTurnFailed, Err: errors.New("x")}, {Kind: lash.EventLeaseBusy}, {Kind: lash.EventLeaseLost},
		{Kind: lash.EventCommitConflict}, {Kind: lash.EventWake}, {Kind: lash.EventWake, Err: errors.New("bad signal")},
		{Kind: lash.EventTurnAborted, Code: lash.FailNondeterminism}, {Kind: lash.EventInputRefused, Err: errors.New("bad")},
		{Kind: lash.EventSettingsMismatch}, {Kind: lash.EventTakeover},
		{Kind: lash.EventModelCall, Model: "m1", Usage: turn.Usage{InputTokens: 10, OutputTokens: 4}},
		{Kind: lash.EventModelCall, Model: "m1", Code: "rate_limit"},
		{Kind: lash.EventToolCall, Tool: "weather", Code: "ok"}, {Kind: lash.EventToolCall, Tool: "weather", Code: "error"},
	} {
		m.observe(ev)
	}
	m.request("submit", 413, time.Millisecond)
	body := scrape(t, m)
	for series, want := range map[string]float64{
		"lash_lease_claims_total": 1, `lash_effects_executed_total{kind="llm-call"}`: 1,
		`lash_effects_replayed_total{kind="tool-calls"}`: 1, "lash_turns_committed_total": 1, "lash_turns_failed_total": 1,
		"lash_lease_busy_total": 1, "lash_lease_losses_total": 1, "lash_commit_conflicts_total": 1, "lash_wakes_total": 1,
		"lash_signals_refused_total": 1, `lash_api_requests_total{code="413",endpoint="submit"}`: 1,
		`lash_effect_duration_seconds_count{kind="llm-call"}`: 1, "lash_turn_duration_seconds_sum": 1,
		`lash_turns_aborted_total{code="nondeterminism"}`: 1, "lash_inputs_refused_total": 1, "lash_settings_mismatches_total": 1,
		"lash_takeovers_total": 1, `lash_model_calls_total{model="m1"}`: 2, `lash_model_tokens_total{direction="in",model="m1"}`: 10,
		`lash_model_tokens_total{direction="out",model="m1"}`: 4, `lash_model_errors_total{code="rate_limit",model="m1"}`: 1,
		`lash_tool_calls_total{status="ok",tool="weather"}`: 1, `lash_tool_calls_total{status="error",tool="weather"}`: 1,
	} {
		if got, ok := metricValue(body, series); !ok || got != want {
			t.Errorf("%s = %v (found %v), want %v", series, got, ok, want)
		}
	}
}

// scrape reads /metrics over HTTP.
func scrape(t *testing.T, m *metrics) string {
	t.Helper()
	srv, addr, err := serveHTTP("127.0.0.1:0", &health{}, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
