package server

import (
	"context"
	"log/slog"

	artbroker "github.com/jobplane/jobplane/internal/artifact/broker"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/metrics"
	"github.com/jobplane/jobplane/internal/retention"
	"github.com/jobplane/jobplane/internal/store"
)

// newSweeper is the retention sweeper of this replica: every replica runs
// it, and the system lease lets one of them sweep at a time.
func newSweeper(cfg config.Server, st store.Store, objs objectStore, arts *artbroker.Service, clk clock.Clock, log *slog.Logger, mets *metrics.Metrics) *retention.Sweeper {
	return retention.New(retention.Config{Store: st, Objects: objs, Clock: clk, Logger: log, Metrics: mets,
		DefaultLogs: cfg.Retention.Logs, DefaultArtifacts: cfg.Retention.Artifacts, UploadTimeout: arts.UploadTimeout(),
		ArchiveLogsAfter: cfg.Retention.ArchiveLogs})
}

// startRetention runs the sweeper every retention.DefaultInterval.
func (s *Server) startRetention(ctx context.Context, sw *retention.Sweeper) {
	s.loop(ctx, "retention sweep", retention.DefaultInterval, func(ctx context.Context) error {
		rep, err := sw.Sweep(ctx)
		if !rep.Skipped && (rep.LogRuns > 0 || rep.ArtifactRuns > 0 || rep.Capabilities > 0 || rep.Tickets > 0 ||
			rep.LogArchives > 0 || rep.LogRunsMoved > 0 || rep.StagedUploads > 0) {
			s.log.InfoContext(ctx, "server: retention sweep", "log_runs", rep.LogRuns, "log_lines", rep.LogLines,
				"artifact_runs", rep.ArtifactRuns, "artifacts", rep.Artifacts, "capabilities", rep.Capabilities, "tickets", rep.Tickets,
				"log_archives", rep.LogArchives, "log_lines_moved", rep.LogLinesMoved, "staged_uploads", rep.StagedUploads)
		}
		return err
	})
}
