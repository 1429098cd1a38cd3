package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/metrics"
	"github.com/jobplane/jobplane/internal/store"
)

// withMetrics serves /metrics next to the API and counts every API request.
// /metrics needs no token, like /healthz: Prometheus scrapes it, and it
// carries counts, job and pool names and runner IDs, never parameters or
// secrets (docs/operations.md says to keep it on the internal network).
func withMetrics(api http.Handler, m *metrics.Metrics, clk clock.Clock) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.Handle("/", m.Instrument(api, clk))
	return mux
}

// startSealer links committed audit events into the chain every interval,
// on every replica (they take turns in the database).
func (s *Server) startSealer(ctx context.Context, st store.Store, log *slog.Logger, every time.Duration) *audit.Sealer {
	sealer := audit.NewSealer(st, log)
	s.loop(ctx, "audit sealer", every, func(ctx context.Context) error {
		_, err := sealer.Seal(ctx)
		return err
	})
	return sealer
}
