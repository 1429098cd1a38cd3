package tracing

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is the process's tracer, or the absence of one. The zero value
// and nil are off.
type Tracing struct {
	tracer   trace.Tracer
	provider *sdktrace.TracerProvider // nil when not ours to shut down
}

// instrumentation names the tracer, as OpenTelemetry asks.
const instrumentation = "github.com/jobplane/jobplane"

// propagator is W3C trace context (the traceparent header and variable).
var propagator = propagation.TraceContext{}

// ErrConfig is a setting of the OTEL_* variables that jobplane cannot honour.
var ErrConfig = errors.New("tracing configuration")

// enabled decides from the OTEL_* variables whether traces are exported,
// refusing what it cannot do rather than ignoring it.
func enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "":
	case "none":
		return false, nil
	case "otlp":
		on = true
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: jobplane exports traces with otlp (or none): %w", exp, ErrConfig)
	}
	if !on {
		return false, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch p := getenv(k); p {
		case "", "http/protobuf", "http/json":
		default:
			// gRPC would bring a second transport stack into the binary
			// for what OTLP over HTTP does as well.
			return false, fmt.Errorf("%s=%s: jobplane sends OTLP over HTTP: use http/protobuf (port 4318) or http/json: %w", k, p, ErrConfig)
		}
	}
	return true, nil
}

// FromEnv starts tracing as the OTEL_* variables say, naming the process
// service unless OTEL_SERVICE_NAME does. Off, it returns a Tracing that
// does nothing and starts nothing. The exporter itself reads the
// endpoint, headers, timeout, compression and protocol variables; the
// SDK reads the sampler (OTEL_TRACES_SAMPLER) and the batching
// (OTEL_BSP_*) ones.
func FromEnv(ctx context.Context, service string) (*Tracing, error) {
	on, err := enabled(os.Getenv)
	if err != nil || !on {
		return &Tracing{}, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv(),
		resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{tracer: tp.Tracer(instrumentation), provider: tp}, nil
}

// New is tracing with the given provider (tests: an in-memory recorder).
func New(tp trace.TracerProvider) *Tracing {
	return &Tracing{tracer: tp.Tracer(instrumentation)}
}

// Enabled reports whether spans are made.
func (t *Tracing) Enabled() bool { return t != nil && t.tracer != nil }

// Tracer is the tracer, a no-op one when off.
func (t *Tracing) Tracer() trace.Tracer {
	if !t.Enabled() {
		return noop.NewTracerProvider().Tracer(instrumentation)
	}
	return t.tracer
}

// Shutdown exports what is buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// RunContext is ctx inside the run's trace: its parent is the run's root
// span, derived from the run ID alone (see the package doc).
func RunContext(ctx context.Context, runID string) context.Context {
	d := sha256.Sum256([]byte(runID))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], d[:16])
	copy(sid[:], d[16:24])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// RunTraceID is the trace ID of a run's trace, in hex, as tracing
// backends show it.
func RunTraceID(runID string) string {
	return trace.SpanContextFromContext(RunContext(context.Background(), runID)).TraceID().String()
}

// Traceparent is the W3C traceparent of ctx's span, "" when it has none:
// the TRACEPARENT variable a job receives.
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}
