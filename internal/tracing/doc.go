// Package tracing is jobplane's OpenTelemetry tracing, kept at the edges:
// an HTTP middleware that makes a span of every API request, a store
// decorator that makes a span of every store transaction, and a client
// transport that hands the current trace on to the server.
//
// It is off by default. FromEnv reads the standard OTEL_* variables: an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp turns it
// on; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none keeps it off.
// Off, every piece hands back what it was given (the handler, the store,
// the transport) and nothing runs: no exporter, no goroutine, no network.
//
// A run's trace: every run has a trace ID of its own, the first 16 bytes
// of SHA-256 of its run ID, so that anything about the run can join it
// without the server storing a trace context. The worker makes an attempt
// span in that trace (its parent is the run's root, whose span ID is the
// next 8 bytes of the same digest), hands it to the job as TRACEPARENT and
// sends it with the attempt's requests (renew, logs, result), so the
// server's spans of those requests, the worker's and the job's own spans
// all land in the run's trace.
package tracing
