// Package tracing carries one OpenTelemetry trace from a webhook delivery
// to the apply of the changes it caused (DESIGN.md §7): the syncer writes
// the W3C traceparent of its sync into each ChangeRequest it creates
// (annotation gitops.sluice.dev/traceparent), and the operator continues
// that trace for the gate and the apply.
//
// Setup installs a tracer provider that always makes trace ids (so the
// annotation and the logs can be correlated without a collector) and
// exports spans over OTLP/HTTP only when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the standard OTLP settings
// apply).
package tracing

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Annotation holds the W3C traceparent of the sync that made a
// ChangeRequest (the API's constant: readers need no OpenTelemetry).
const Annotation = sluicev1.AnnotationTraceParent

var propagator = propagation.TraceContext{}

// Setup installs the global tracer provider and propagator for service
// (e.g. "gitops-syncer"). The returned function flushes and stops it.
func Setup(ctx context.Context, service, version string) (func(context.Context) error, error) {
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version))),
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	return tp.Shutdown, nil
}

// Inject returns the traceparent of the span in ctx ("" without one).
func Inject(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c.Get("traceparent")
}

// Extract returns ctx with the remote span of traceparent as the parent of
// the spans started from it; ctx itself when traceparent is empty or
// malformed.
func Extract(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// ExtractHeaders is Extract for an incoming request's headers.
func ExtractHeaders(ctx context.Context, h propagation.TextMapCarrier) context.Context {
	return propagator.Extract(ctx, h)
}

// Tracer is the tracer of a Sluice component.
func Tracer(component string) trace.Tracer {
	return otel.Tracer("github.com/sluice-gitops/sluice/" + component)
}

// TraceID is the trace id of the span in ctx, for logs ("" without one).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}
