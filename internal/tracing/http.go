package tracing

import (
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of jobplane's own identifiers.
const (
	AttrRunID     = attribute.Key("jobplane.run_id")
	AttrAttemptID = attribute.Key("jobplane.attempt_id")
	AttrRunnerID  = attribute.Key("jobplane.runner_id")
)

// Handler makes a server span of every request next serves, a child of
// the caller's traceparent when it sends one. The span is named after the
// route pattern ("POST /v1/runner/claim"), never the raw path: upload and
// source paths carry capabilities. Off, it is next itself.
func (t *Tracing) Handler(next http.Handler) http.Handler {
	if !t.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method)))
		defer span.End()
		sw := &spanWriter{ResponseWriter: w, span: span, status: http.StatusOK}
		r = r.WithContext(ctx)
		next.ServeHTTP(sw, r)
		// The ServeMux that dispatched set the pattern on this request.
		if r.Pattern != "" {
			span.SetName(r.Pattern)
			_, route, _ := strings.Cut(r.Pattern, " ")
			span.SetAttributes(semconv.HTTPRoute(route))
		}
		span.SetAttributes(semconv.HTTPResponseStatusCode(sw.status))
		span.SetAttributes(requestIDs(r)...)
		if sw.status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(sw.status))
		}
	})
}

// requestIDs are the run, attempt and runner a request names.
func requestIDs(r *http.Request) []attribute.KeyValue {
	var out []attribute.KeyValue
	if id := r.Header.Get("Jobplane-Run"); id != "" {
		out = append(out, AttrRunID.String(id))
	} else if id := r.PathValue("id"); strings.HasPrefix(id, "run_") {
		out = append(out, AttrRunID.String(id))
	}
	if id := r.Header.Get("Jobplane-Attempt"); id != "" {
		out = append(out, AttrAttemptID.String(id))
	}
	if id := r.Header.Get("Jobplane-Runner"); id != "" {
		out = append(out, AttrRunnerID.String(id))
	}
	return out
}

// spanWriter remembers the status and records an internal error the API
// reports on the span.
type spanWriter struct {
	http.ResponseWriter
	span   trace.Span
	status int
	wrote  bool
}

func (w *spanWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *spanWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *spanWriter) Flush() {
	w.wrote = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *spanWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ReportError records an internal error on the span, and passes it on to
// a writer beneath that logs it.
func (w *spanWriter) ReportError(err error) bool {
	w.span.RecordError(err)
	if r, ok := w.ResponseWriter.(interface{ ReportError(error) bool }); ok {
		return r.ReportError(err)
	}
	return false
}

// Transport sends the trace context of each request's context as the
// traceparent header, so that the server's spans join the caller's trace.
// A request whose context has no span is sent as it is; base nil is
// http.DefaultTransport.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return transport{base}
}

type transport struct{ base http.RoundTripper }

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !trace.SpanContextFromContext(r.Context()).IsValid() {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	propagator.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return t.base.RoundTrip(r)
}
