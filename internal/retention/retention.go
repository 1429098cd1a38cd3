package retention

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// LeaseName is the system lease that elects the sweeping replica.
const LeaseName = "retention"

// Actor is the audit actor of the sweep's deletions.
const Actor = "system:retention"

// Defaults of a Config.
const (
	DefaultInterval  = time.Minute
	DefaultLeaseTTL  = 5 * time.Minute
	DefaultBatch     = 100
	DefaultLogBatch  = 5000
	DefaultMaxRounds = 20
	// stampMargin is how far before the latest stamped end a round looks
	// for ended runs again: a run's end time is set before its transaction
	// commits, so a run may become visible after a later-ending one.
	stampMargin = time.Hour
	// staleMargin is added to the upload timeout before an uploading row
	// counts as interrupted: an upload still in flight is younger.
	staleMargin = 5 * time.Minute
)

// Observer counts what a sweep removed (metrics.Metrics is one).
type Observer interface {
	Swept(kind string, n int)
}

// Config configures a Sweeper.
type Config struct {
	Store store.Store
	// Objects holds the artifact bytes (nil: artifacts are not swept).
	Objects artifact.Storage
	Clock   clock.Clock
	Logger  *slog.Logger
	Metrics Observer
	// Holder names this replica in the lease; a random incarnation when
	// empty, so that a restarted replica is a new holder.
	Holder string
	// DefaultLogs and DefaultArtifacts apply to runs whose job sets no
	// period (zero: keep).
	DefaultLogs, DefaultArtifacts time.Duration
	// UploadTimeout is the server's upload timeout: an uploading artifact
	// row older than it (plus a margin) belongs to an interrupted publish.
	UploadTimeout time.Duration
	// Batch bounds the rows of one transaction, LogBatch the log lines.
	Batch, LogBatch int
	// MaxRounds bounds the batches of each kind in one Sweep, so that a
	// backlog is worked off over several sweeps rather than in one long one.
	MaxRounds int
	// LeaseTTL is how long a sweep may hold the lease without renewing.
	LeaseTTL time.Duration
	// ArchiveLogsAfter is how long after its end a run's logs move from
	// the database to Objects (zero: they stay in the database).
	ArchiveLogsAfter time.Duration
}

// Sweeper deletes what retention says is due.
type Sweeper struct {
	cfg Config
	// round runs this replica's rounds one at a time: the periodic one and
	// an administrator's would otherwise both hold the replica's lease.
	round sync.Mutex
}

// New returns a Sweeper with cfg's zero fields defaulted.
func New(cfg Config) *Sweeper {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopObserver{}
	}
	if cfg.Holder == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Holder = "replica-" + hex.EncodeToString(b[:])
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.LogBatch <= 0 {
		cfg.LogBatch = DefaultLogBatch
	}
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = DefaultMaxRounds
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.UploadTimeout <= 0 {
		cfg.UploadTimeout = 15 * time.Minute
	}
	return &Sweeper{cfg: cfg}
}

type nopObserver struct{}

func (nopObserver) Swept(string, int) {}

// Report is what one Sweep did.
type Report = protocol.PruneReport

// ErrLeaseLost: the sweep lost its lease in the middle of a round; what it
// committed before stays, the next holder finishes.
var ErrLeaseLost = errors.New("retention lease lost")

func (s *Sweeper) ctx(ctx context.Context) context.Context {
	return store.WithSystem(ctx, "retention sweep") // cross-tenant by nature (docs/operations.md)
}

// Sweep takes the lease and runs one round: fix the periods of newly ended
// runs, delete due logs and artifacts, sweep capability rows. It returns
// with Skipped set when another replica holds the lease.
func (s *Sweeper) Sweep(ctx context.Context) (Report, error) {
	s.round.Lock()
	defer s.round.Unlock()
	ctx = s.ctx(ctx)
	var rep Report
	var lease *store.SystemLease
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) (err error) {
		lease, err = tx.SystemLeaseAcquire(ctx, LeaseName, s.cfg.Holder, s.cfg.LeaseTTL, s.cfg.Clock.NowOrNil())
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		rep.Skipped = true
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("retention lease: %w", err)
	}
	w := &writer{s: s, token: lease.Token}
	steps := []func(context.Context, *writer, *Report) error{s.stamp, s.pruneLogs, s.moveLogs, s.pruneArtifacts, s.sweepCapabilities}
	for _, step := range steps {
		if err := step(ctx, w, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// writer runs the sweep's transactions, each fenced by the lease token.
type writer struct {
	s     *Sweeper
	token int64
}

func (w *writer) inTx(ctx context.Context, fn func(tx store.Tx) error) error {
	err := w.s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.SystemLeaseCheck(ctx, LeaseName, w.token, w.s.cfg.Clock.NowOrNil()); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return ErrLeaseLost
			}
			return err
		}
		return fn(tx)
	})
	return err
}

// now is the time a decision is taken at: the injected clock, else the
// database's.
func (s *Sweeper) now(ctx context.Context) (time.Time, error) {
	return s.cfg.Store.Now(ctx, s.cfg.Clock.NowOrNil())
}

// jobPeriods reads a run spec's retention periods (zero: not set).
func jobPeriods(spec json.RawMessage) (logs, artifacts time.Duration) {
	var v struct {
		Retention *struct {
			Logs      string `json:"logs"`
			Artifacts string `json:"artifacts"`
		} `json:"retention"`
	}
	if len(spec) == 0 || json.Unmarshal(spec, &v) != nil || v.Retention == nil {
		return 0, 0
	}
	logs, _ = time.ParseDuration(v.Retention.Logs)
	artifacts, _ = time.ParseDuration(v.Retention.Artifacts)
	return max(logs, 0), max(artifacts, 0)
}

// periods fixes a run's due times from its job's periods, else the
// server's defaults.
func (s *Sweeper) periods(r *store.EndedRun) *store.RunRetention {
	logs, arts := jobPeriods(r.Spec)
	if logs == 0 {
		logs = s.cfg.DefaultLogs
	}
	if arts == 0 {
		arts = s.cfg.DefaultArtifacts
	}
	x := &store.RunRetention{RunID: r.ID, Tenant: r.Tenant, Job: r.Job, FinishedAt: r.FinishedAt}
	if logs > 0 {
		x.LogsDueAt = ptr(r.FinishedAt.Add(logs))
	}
	if arts > 0 {
		x.ArtifactsDueAt = ptr(r.FinishedAt.Add(arts))
	}
	return x
}

func ptr[T any](v T) *T { return &v }

// unstamped lists ended runs without periods, from a little before the
// latest stamped end.
func (s *Sweeper) unstamped(ctx context.Context, limit int) ([]*store.EndedRun, error) {
	wm, err := s.cfg.Store.RetentionWatermark(ctx)
	if err != nil {
		return nil, err
	}
	since := time.Time{}
	if !wm.IsZero() {
		since = wm.Add(-stampMargin)
	}
	return s.cfg.Store.RunsEndedUnstamped(ctx, since, limit)
}

func (s *Sweeper) stamp(ctx context.Context, w *writer, rep *Report) error {
	for range s.cfg.MaxRounds {
		runs, err := s.unstamped(ctx, s.cfg.Batch)
		if err != nil {
			return fmt.Errorf("list ended runs: %w", err)
		}
		if len(runs) == 0 {
			return nil
		}
		if err := w.inTx(ctx, func(tx store.Tx) error {
			for _, r := range runs {
				if err := tx.RetentionStamp(ctx, s.periods(r)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("fix retention periods: %w", err)
		}
		rep.Stamped += len(runs)
		if len(runs) < s.cfg.Batch {
			return nil
		}
	}
	return nil
}

// logsPrunedDetails: "run.logs_pruned".
type logsPrunedDetails struct {
	Job   string    `json:"job"`
	Lines int       `json:"lines"`
	DueAt time.Time `json:"due_at"`
}

func (s *Sweeper) pruneLogs(ctx context.Context, w *writer, rep *Report) error {
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	due, err := s.cfg.Store.RetentionDue(ctx, store.RetainLogs, &now, s.cfg.Batch)
	if err != nil {
		return fmt.Errorf("list due logs: %w", err)
	}
	rounds := 0
	for _, r := range due {
		lines, err := s.dropArchives(ctx, w, r)
		if err != nil {
			return fmt.Errorf("delete archived logs of %s: %w", r.RunID, err)
		}
		done := false
		for !done {
			if rounds >= s.cfg.MaxRounds*10 {
				return nil // the rest in the next sweep
			}
			rounds++
			// The store may run the function more than once: what it
			// counts is kept only once the transaction committed.
			var n int
			err := w.inTx(ctx, func(tx store.Tx) (err error) {
				n, err = tx.LogPrune(ctx, r.RunID, s.cfg.LogBatch)
				if err != nil || n == s.cfg.LogBatch {
					return err
				}
				if err := tx.RetentionMarkPruned(ctx, r.RunID, store.RetainLogs, s.cfg.Clock.NowOrNil()); err != nil {
					return err
				}
				if lines+n == 0 {
					return nil // nothing went: nothing to audit
				}
				return audit.Recorder{Clock: s.cfg.Clock}.Append(ctx, tx, r.Tenant, Actor, "run.logs_pruned", r.RunID,
					logsPrunedDetails{Job: r.Job, Lines: lines + n, DueAt: *r.LogsDueAt})
			})
			if err != nil {
				return fmt.Errorf("delete logs of %s: %w", r.RunID, err)
			}
			lines += n
			done = n < s.cfg.LogBatch
		}
		s.cfg.Metrics.Swept("log_line", lines)
		s.cfg.Metrics.Swept("run_logs", 1)
		rep.LogRuns++
		rep.LogLines += lines
		s.cfg.Logger.InfoContext(ctx, "retention: deleted a run's logs", "run_id", r.RunID, "lines", lines)
	}
	return nil
}

// prunedArtifact is one artifact in "run.artifacts_pruned".
type prunedArtifact struct {
	Attempt string `json:"attempt"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
}

// artifactsPrunedDetails: "run.artifacts_pruned".
type artifactsPrunedDetails struct {
	Artifacts []prunedArtifact `json:"artifacts"`
	DueAt     time.Time        `json:"due_at"`
	Job       string           `json:"job"`
}

func (s *Sweeper) pruneArtifacts(ctx context.Context, w *writer, rep *Report) error {
	if s.cfg.Objects == nil {
		return nil
	}
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	due, err := s.cfg.Store.RetentionDue(ctx, store.RetainArtifacts, &now, s.cfg.Batch)
	if err != nil {
		return fmt.Errorf("list due artifacts: %w", err)
	}
	rounds := 0
	for _, r := range due {
		count, done := 0, false
		for !done {
			if rounds >= s.cfg.MaxRounds {
				return nil
			}
			rounds++
			var marked []*store.Artifact
			err := w.inTx(ctx, func(tx store.Tx) (err error) {
				marked, err = tx.ArtifactMarkDeleting(ctx, r.RunID, s.cfg.Batch)
				if err != nil {
					return err
				}
				if len(marked) < s.cfg.Batch {
					if err := tx.RetentionMarkPruned(ctx, r.RunID, store.RetainArtifacts, s.cfg.Clock.NowOrNil()); err != nil {
						return err
					}
				}
				if len(marked) == 0 {
					return nil // nothing went: nothing to audit
				}
				d := artifactsPrunedDetails{Artifacts: []prunedArtifact{}, DueAt: *r.ArtifactsDueAt, Job: r.Job}
				for _, a := range marked {
					d.Artifacts = append(d.Artifacts, prunedArtifact{Attempt: a.AttemptID, ID: a.ID, Name: a.Name, SHA256: a.SHA256, Size: a.Size})
				}
				return audit.Recorder{Clock: s.cfg.Clock}.Append(ctx, tx, r.Tenant, Actor, "run.artifacts_pruned", r.RunID, d)
			})
			if err != nil {
				return fmt.Errorf("delete artifacts of %s: %w", r.RunID, err)
			}
			done = len(marked) < s.cfg.Batch
			for _, a := range marked {
				if err := s.dropArtifact(ctx, w, a); err != nil {
					return err
				}
			}
			count += len(marked)
		}
		s.cfg.Metrics.Swept("artifact", count)
		s.cfg.Metrics.Swept("run_artifacts", 1)
		rep.ArtifactRuns++
		rep.Artifacts += count
		s.cfg.Logger.InfoContext(ctx, "retention: deleted a run's artifacts", "run_id", r.RunID, "artifacts", count)
	}
	return nil
}

// dropArtifact deletes an artifact's object, then its row: a row whose
// object is gone is never left servable, and a sweep interrupted between
// the two finds the row again.
func (s *Sweeper) dropArtifact(ctx context.Context, w *writer, a *store.Artifact) error {
	if a.State != store.ArtifactPending {
		if err := s.cfg.Objects.Delete(ctx, a.StorageKey); err != nil {
			return fmt.Errorf("delete object of artifact %s: %w", a.ID, err)
		}
	}
	err := w.inTx(ctx, func(tx store.Tx) error { return tx.ArtifactDelete(ctx, a.ID) })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete artifact %s: %w", a.ID, err)
	}
	return nil
}

func (s *Sweeper) sweepCapabilities(ctx context.Context, w *writer, rep *Report) error {
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	cutoff := now.Add(-s.cfg.UploadTimeout - staleMargin)
	for range s.cfg.MaxRounds {
		stale, err := s.cfg.Store.ArtifactListStale(ctx, cutoff, &now, s.cfg.Batch)
		if err != nil {
			return fmt.Errorf("list stale artifact rows: %w", err)
		}
		for _, a := range stale {
			if a.State != store.ArtifactPending && s.cfg.Objects == nil {
				continue
			}
			if err := s.dropArtifact(ctx, w, a); err != nil {
				return err
			}
			rep.Capabilities++
			s.cfg.Metrics.Swept(string("artifact_"+a.State), 1)
		}
		if len(stale) < s.cfg.Batch {
			break
		}
	}
	if s.cfg.Objects != nil {
		// Uploads a crash left staged: older than any upload in flight.
		// Not fenced (it writes no row), and harmless twice.
		for range s.cfg.MaxRounds {
			n, err := s.cfg.Objects.SweepStaged(ctx, cutoff, s.cfg.Batch)
			rep.StagedUploads += n
			s.cfg.Metrics.Swept("staged_upload", n)
			if err != nil {
				return fmt.Errorf("sweep staged uploads: %w", err)
			}
			if n < s.cfg.Batch {
				break
			}
		}
	}
	for range s.cfg.MaxRounds {
		var n int
		if err := w.inTx(ctx, func(tx store.Tx) (err error) {
			n, err = tx.SourceTicketPurge(ctx, &now, s.cfg.Batch)
			return err
		}); err != nil {
			return fmt.Errorf("purge source tickets: %w", err)
		}
		rep.Tickets += n
		s.cfg.Metrics.Swept("source_ticket", n)
		if n < s.cfg.Batch {
			break
		}
	}
	return nil
}
