package retention

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Planned is one thing a sweep would delete now.
type Planned = protocol.PruneItem

// PlannedArtifact is an artifact row a sweep would drop.
type PlannedArtifact = protocol.PruneArtifact

// KindLogsMove is the Planned kind of a run whose logs a sweep would move
// from the database to the object store (not delete).
const KindLogsMove = "logs_move"

// planScan is how many rows of each kind Plan reads before it keeps
// those of the tenant asked for.
const planScan = 1000

// Plan lists, without deleting or writing anything, at most limit of the
// things a sweep run now would delete, earliest due first: runs whose
// logs or artifacts are due (including ended runs whose periods the next
// sweep would fix), abandoned artifact rows, and, when logs move to the
// object store, runs whose logs would leave the database (KindLogsMove). tenant ("" : every
// tenant) keeps only that tenant's. It reads the first planScan due
// rows of each kind, so a long backlog is listed a part at a time, as
// sweeps work it off. It needs no lease.
func (s *Sweeper) Plan(ctx context.Context, tenant string, limit int) ([]Planned, error) {
	ctx = s.ctx(ctx)
	if limit <= 0 {
		limit = s.cfg.Batch
	}
	scan := max(limit, planScan)
	now, err := s.now(ctx)
	if err != nil {
		return nil, err
	}
	var out []Planned
	add := func(kind store.RetentionKind, r *store.RunRetention, due *time.Time) {
		if due != nil && !due.After(now) && (tenant == "" || r.Tenant == tenant) {
			out = append(out, Planned{Kind: string(kind), Tenant: r.Tenant, RunID: r.RunID, Job: r.Job, DueAt: *due})
		}
	}
	// addMove lists a run whose logs move out of the database: due when
	// it has been ended for ArchiveLogsAfter.
	addMove := func(r *store.RunRetention, now *time.Time) {
		due := r.FinishedAt.Add(s.cfg.ArchiveLogsAfter)
		if !due.After(*now) && (tenant == "" || r.Tenant == tenant) {
			out = append(out, Planned{Kind: KindLogsMove, Tenant: r.Tenant, RunID: r.RunID, Job: r.Job, DueAt: due})
		}
	}
	for _, kind := range []store.RetentionKind{store.RetainLogs, store.RetainArtifacts} {
		due, err := s.cfg.Store.RetentionDue(ctx, kind, &now, scan)
		if err != nil {
			return nil, fmt.Errorf("list due %s: %w", kind, err)
		}
		for _, r := range due {
			if kind == store.RetainLogs {
				add(kind, r, r.LogsDueAt)
			} else {
				add(kind, r, r.ArtifactsDueAt)
			}
		}
	}
	ended, err := s.unstamped(ctx, scan)
	if err != nil {
		return nil, fmt.Errorf("list ended runs: %w", err)
	}
	for _, e := range ended {
		r := s.periods(e)
		add(store.RetainLogs, r, r.LogsDueAt)
		add(store.RetainArtifacts, r, r.ArtifactsDueAt)
		if s.moving() && (r.LogsDueAt == nil || r.LogsDueAt.After(now)) {
			// The sweep stamps before it moves, so this one moves in the
			// same round, unless its logs are deleted instead.
			addMove(r, &now)
		}
	}
	if s.moving() {
		unarchived, err := s.cfg.Store.RunsLogsUnarchived(ctx, now.Add(-s.cfg.ArchiveLogsAfter), &now, scan)
		if err != nil {
			return nil, fmt.Errorf("list runs whose logs move: %w", err)
		}
		for _, r := range unarchived {
			addMove(r, &now)
		}
	}
	stale, err := s.cfg.Store.ArtifactListStale(ctx, now.Add(-s.cfg.UploadTimeout-staleMargin), &now, scan)
	if err != nil {
		return nil, fmt.Errorf("list stale artifact rows: %w", err)
	}
	for _, a := range stale {
		if tenant != "" && a.Tenant != tenant {
			continue
		}
		due := a.CreatedAt.Add(s.cfg.UploadTimeout + staleMargin)
		if a.State == store.ArtifactPending {
			due = a.ExpiresAt
		}
		out = append(out, Planned{Kind: "capability", Tenant: a.Tenant, RunID: a.RunID, DueAt: due,
			Artifact: &PlannedArtifact{ID: a.ID, Name: a.Name, State: string(a.State)}})
	}
	slices.SortStableFunc(out, func(a, b Planned) int { return a.DueAt.Compare(b.DueAt) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
