package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracing starts exporting the node's spans over OTLP/HTTP when an
// endpoint is configured (--otlp-endpoint, or OpenTelemetry's own
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
// returns the provider (nil when off) and what flushes and stops it.
func tracing(ctx context.Context, s *settings) (*sdktrace.TracerProvider, func(), error) {
	var opts []otlptracehttp.Option
	switch {
	case s.otlpEndpoint != "":
		// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: traces go to its
		// /v1/traces unless it names a path.
		u, err := url.Parse(s.otlpEndpoint)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, nil, fmt.Errorf("--otlp-endpoint %q: want a URL like http://localhost:4318", s.otlpEndpoint)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "":
		return nil, func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "lash-node"), attribute.String("service.version", nodeVersion()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, func() {
		// Spans of the last turns go out before the node exits.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}
