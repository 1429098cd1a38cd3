package tracing

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestEnabledFromEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		on   bool
		fail string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, fail: "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, fail: "OTEL_TRACES_EXPORTER=zipkin"},
	} {
		on, err := enabled(func(k string) string { return c.env[k] })
		if c.fail != "" {
			require.ErrorIs(t, err, ErrConfig, "%v", c.env)
			require.ErrorContains(t, err, c.fail)
			continue
		}
		require.NoError(t, err, "%v", c.env)
		require.Equal(t, c.on, on, "enabled(%v)", c.env)
	}
}

// Off, nothing is wrapped: the handler, store and tracer given are used as
// they are, so the hot paths pay nothing.
func TestOffIsNothing(t *testing.T) {
	t.Parallel()
	off, err := FromEnv(context.Background(), "test") // no OTEL_* in tests
	require.NoError(t, err)
	require.False(t, off.Enabled())
	var nilT *Tracing
	for _, tr := range []*Tracing{off, nilT} {
		h := http.NewServeMux()
		require.Same(t, h, tr.Handler(h))
		require.Nil(t, tr.Store(nil, "sqlite"))
		require.NoError(t, tr.Shutdown(context.Background()))
		ctx, end := tr.StartAttempt(context.Background(), "run_1", "att_1", "job")
		end("succeeded")
		require.True(t, trace.SpanContextFromContext(ctx).IsRemote(), "off: only the run's root, no span of ours")
	}
}

func recorder() (*Tracing, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	return New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))), sr
}

// The request span is named after the route, is a child of the caller's
// traceparent, carries the IDs, and records an internal error reported
// through its writer.
func TestHandlerSpan(t *testing.T) {
	t.Parallel()
	tr, sr := recorder()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runner/attempt/result", func(w http.ResponseWriter, r *http.Request) {
		require.True(t, trace.SpanContextFromContext(r.Context()).IsValid(), "the handler runs in the span")
		w.(interface{ ReportError(error) bool }).ReportError(errors.New("disk on fire"))
		w.WriteHeader(http.StatusInternalServerError)
	})
	srv := httptest.NewServer(tr.Handler(mux))
	defer srv.Close()
	parent := RunContext(context.Background(), "run_1")
	req, err := http.NewRequestWithContext(parent, http.MethodPost, srv.URL+"/v1/runner/attempt/result", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Jobplane-Run", "run_1")
	req.Header.Set("Jobplane-Attempt", "att_1")
	req.Header.Set("Jobplane-Runner", "rnr_1")
	resp, err := (&http.Client{Transport: Transport(nil)}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()

	spans := sr.Ended()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, "POST /v1/runner/attempt/result", s.Name())
	require.Equal(t, trace.SpanKindServer, s.SpanKind())
	require.Equal(t, RunTraceID("run_1"), s.SpanContext().TraceID().String(), "the span is in the run's trace")
	require.Equal(t, trace.SpanContextFromContext(parent).SpanID(), s.Parent().SpanID())
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	require.Equal(t, "run_1", attrs["jobplane.run_id"])
	require.Equal(t, "att_1", attrs["jobplane.attempt_id"])
	require.Equal(t, "rnr_1", attrs["jobplane.runner_id"])
	require.Equal(t, "500", attrs["http.response.status_code"])
	require.Equal(t, "/v1/runner/attempt/result", attrs["http.route"])
	require.Len(t, s.Events(), 1, "the reported error")
}

// Each run's trace ID is fixed by its run ID, so anything about the run
// can join it, and different runs have different traces.
func TestRunContext(t *testing.T) {
	t.Parallel()
	a := trace.SpanContextFromContext(RunContext(context.Background(), "run_01HZX3QA0000000000000000"))
	b := trace.SpanContextFromContext(RunContext(context.Background(), "run_01HZX3QA0000000000000000"))
	c := trace.SpanContextFromContext(RunContext(context.Background(), "run_01HZX3QA0000000000000001"))
	require.True(t, a.IsValid() && a.IsSampled())
	require.Equal(t, a, b)
	require.NotEqual(t, a.TraceID(), c.TraceID())
	tp := Traceparent(RunContext(context.Background(), "run_01HZX3QA0000000000000000"))
	require.Equal(t, "00-"+a.TraceID().String()+"-"+a.SpanID().String()+"-01", tp)
}
