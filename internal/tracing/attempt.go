package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// StartAttempt is the worker's span of one attempt, in the run's trace.
// Off, ctx still enters the run's trace (its root), so the job's
// TRACEPARENT and the attempt's requests carry it: a job that traces
// itself, and a server that traces, join the run's trace even when the
// worker does not trace. end ends the span with the attempt's outcome.
func (t *Tracing) StartAttempt(ctx context.Context, runID, attemptID, job string) (_ context.Context, end func(outcome string)) {
	ctx = RunContext(ctx, runID)
	if !t.Enabled() {
		return ctx, func(string) {}
	}
	ctx, span := t.tracer.Start(ctx, "attempt "+job, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrRunID.String(runID), AttrAttemptID.String(attemptID), attribute.String("jobplane.job", job)))
	return ctx, func(outcome string) {
		span.SetAttributes(attribute.String("jobplane.outcome", outcome))
		if outcome != "succeeded" {
			span.SetStatus(codes.Error, outcome)
		}
		span.End()
	}
}

// LinkRun links the span of ctx (the request that created the run) to the
// run's trace, the link naming the run, so that a trace of the caller
// leads to the run's. It does nothing when the span is not recording, which is
// always the case with tracing off.
func LinkRun(ctx context.Context, runID string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddLink(trace.Link{SpanContext: trace.SpanContextFromContext(RunContext(context.Background(), runID)),
		Attributes: []attribute.KeyValue{AttrRunID.String(runID)}})
}
