package lash

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lash-run/lash/turn"
)

// WithTracerProvider traces the node's work with OpenTelemetry: a span per
// turn run (lash.turn) and per effect (lash.<kind>: lash.llm-call,
// lash.tool-call, lash.sleep, ...), each effect marked replayed or
// executed (lash.replayed), tool calls with their attempt and whether they
// ran in doubt. Tools served over NATS get the trace context in their
// request headers, so their own spans join the turn's trace. Default:
// none.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp.Tracer("github.com/lash-run/lash") }
}

// tracerOf is the node's tracer, a no-op one without WithTracerProvider.
func tracerOf(o *options) trace.Tracer {
	if o.tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return o.tracer
}

// Span attributes.
const (
	attrSession  = attribute.Key("lash.session")
	attrTurn     = attribute.Key("lash.turn")
	attrNode     = attribute.Key("lash.node")
	attrAttempt  = attribute.Key("lash.attempt")
	attrEffect   = attribute.Key("lash.effect")
	attrReplayed = attribute.Key("lash.replayed")
	attrCall     = attribute.Key("lash.call_id")
	attrTool     = attribute.Key("lash.tool")
	attrInDoubt  = attribute.Key("lash.in_doubt")
)

// effectSpan starts the span of effect e of the turn.
func (d *drive) effectSpan(ctx context.Context, kind turn.Kind, id turn.EffectID) (context.Context, trace.Span) {
	if d.s.n.opts.tracer == nil {
		// Untraced: no span and attributes to build for each effect; ctx
		// keeps the span it carries, which the no-op tracer would hide.
		return ctx, noop.Span{}
	}
	return tracerOf(&d.s.n.opts).Start(ctx, "lash."+kind.String(), trace.WithAttributes(
		attrSession.String(d.s.id), attrTurn.String(d.turn), attrEffect.Int64(int64(id))))
}

// endSpan ends span with err as its status.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
