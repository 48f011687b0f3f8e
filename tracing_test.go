package lash

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lash-run/lash/provider/scripted"
	"github.com/lash-run/lash/testenv"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/tools/natstool"
	"github.com/nats-io/nats.go/micro"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

const forecastScript = `
rule ask
  when tools = 0
  call forecast {"city":"Oslo"}

default
  say Sunny.
`

// attr reads a span attribute as text ("" when absent).
func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A turn's run is a span with a span per effect, marked executed or
// replayed; a tool served over NATS gets the trace context in its request
// and its own span joins the tree under the tool call. A run that finishes
// the turn after a crash shows its effects as replayed.
func TestTraces(t *testing.T) {
	r := newRig(t)
	r.models = testenv.RunModelServer(t, scripted.MustParse(forecastScript))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	svc, err := natstool.Serve(r.conn(), "lash", micro.Config{Name: "forecasts", Version: "1.0.0"}, natstool.Served{
		Name: "forecast", Description: "tomorrow's weather", Schema: []byte(`{"type":"object"}`),
		Handle: func(ctx context.Context, _ natstool.Request) (string, error) {
			_, span := tp.Tracer("forecasts").Start(ctx, "forecast.lookup")
			span.End()
			return "sunny", nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	found, err := natstool.Discover(r.ctx, r.conn(), "lash")
	if err != nil || len(found) != 1 {
		t.Fatalf("discovery: %d tools, %v", len(found), err)
	}
	reg := tools.New()
	if err := reg.Register(found[0]); err != nil {
		t.Fatal(err)
	}
	a := r.node("a", WithTools(reg), WithTracerProvider(tp), withBoundary(func(name string) error {
		if name == "before-commit" {
			return errCrash
		}
		return nil
	}))
	if _, _, err := a.Session("s1").Send(r.ctx, "k1", Input{Text: "Tomorrow in Oslo?"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Session("s1").Run(r.ctx); !errors.Is(err, errCrash) {
		t.Fatalf("run: %v", err)
	}
	first := exp.GetSpans()
	exp.Reset()
	b := r.node("b", WithTools(reg), WithTracerProvider(tp))
	testenv.WaitFor(t, 20*time.Second, func() error {
		res, err := b.Session("s1").Run(r.ctx)
		if err == nil && len(res) != 1 {
			return fmt.Errorf("runs %+v", res)
		}
		return err
	})
	second := exp.GetSpans()

	// The crashed run: executed effects, the tool's span under its call.
	byName := func(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	turns := byName(first, "lash.turn")
	calls := byName(first, "lash.tool-call")
	lookups := byName(first, "forecast.lookup")
	llms := byName(first, "lash.llm-call")
	if len(turns) != 1 || len(calls) != 1 || len(lookups) != 1 || len(llms) != 2 {
		t.Fatalf("first run's spans: %v", names(first))
	}
	turnSpan, call, lookup := turns[0], calls[0], lookups[0]
	if attr(turnSpan, "lash.session") != "s1" || attr(turnSpan, "lash.turn") != "in-1" || attr(turnSpan, "lash.attempt") != "1" ||
		turnSpan.Status.Description == "" {
		t.Errorf("turn span %+v", turnSpan.Attributes)
	}
	for _, s := range append(llms, call) {
		if s.Parent.SpanID() != turnSpan.SpanContext.SpanID() || attr(s, "lash.replayed") != "false" {
			t.Errorf("%s: parent %v (turn %v), replayed %s", s.Name, s.Parent.SpanID(), turnSpan.SpanContext.SpanID(), attr(s, "lash.replayed"))
		}
	}
	if attr(call, "lash.tool") != "forecast" || attr(call, "lash.attempt") != "1" || attr(call, "lash.in_doubt") != "false" {
		t.Errorf("tool call span %+v", call.Attributes)
	}
	if lookup.SpanContext.TraceID() != turnSpan.SpanContext.TraceID() || lookup.Parent.SpanID() != call.SpanContext.SpanID() {
		t.Errorf("the tool's span is not under its call: trace %v parent %v, want trace %v parent %v",
			lookup.SpanContext.TraceID(), lookup.Parent.SpanID(), turnSpan.SpanContext.TraceID(), call.SpanContext.SpanID())
	}

	// The run that finished it: every effect replayed, the tool not called.
	turns = byName(second, "lash.turn")
	if len(turns) != 1 || attr(turns[0], "lash.attempt") != "2" || len(byName(second, "forecast.lookup")) != 0 {
		t.Fatalf("second run's spans: %v", names(second))
	}
	replayed := 0
	for _, s := range second {
		if s.Name == "lash.llm-call" || s.Name == "lash.tool-call" {
			if attr(s, "lash.replayed") != "true" || s.Parent.SpanID() != turns[0].SpanContext.SpanID() {
				t.Errorf("%s in the finishing run: replayed %s", s.Name, attr(s, "lash.replayed"))
			}
			replayed++
		}
	}
	if replayed != 3 {
		t.Fatalf("replayed effect spans: %d of %v", replayed, names(second))
	}
}

func names(spans tracetest.SpanStubs) string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
