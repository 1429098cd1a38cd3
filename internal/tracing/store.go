package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobplane/jobplane/internal/store"
)

// Store is st with a span around every transaction (InTx), a child of the
// span of the context the transaction runs with: the request's, for the
// claim, result and run-request paths. db names the backend ("sqlite",
// "postgresql"). Off, it is st itself.
func (t *Tracing) Store(st store.Store, db string) store.Store {
	if !t.Enabled() {
		return st
	}
	return &tracedStore{Store: st, tracer: t.tracer, db: db}
}

// AttrTxRuns counts how often a transaction's body ran: more than once
// when the store retried it (serialization failures, deadlocks).
const AttrTxRuns = attribute.Key("jobplane.tx.runs")

type tracedStore struct {
	store.Store
	tracer trace.Tracer
	db     string
}

func (s *tracedStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	ctx, span := s.tracer.Start(ctx, "store.tx", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.DBSystemNameKey.String(s.db)))
	defer span.End()
	runs := 0
	err := s.Store.InTx(ctx, func(tx store.Tx) error {
		runs++
		return fn(tx)
	})
	span.SetAttributes(AttrTxRuns.Int(runs))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "transaction failed")
	}
	return err
}

// Commits passes on the count of commits of the store beneath (the
// benchmark reports it).
func (s *tracedStore) Commits() int64 {
	if c, ok := s.Store.(interface{ Commits() int64 }); ok {
		return c.Commits()
	}
	return 0
}
