package config

import (
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/catalog"
)

// Defaults of the data lifecycle.
const (
	DefaultSweepInterval = time.Minute
	DefaultSweepBatch    = 100
	// DefaultArchiveLogsAfter applies with a shared (S3) store; with the
	// filesystem store logs stay in the database unless asked.
	DefaultArchiveLogsAfter = time.Hour
)

// Retention configures what the sweeper deletes and moves.
type Retention struct {
	// Logs and Artifacts are how long the logs and artifacts of an ended
	// run are kept when its job says nothing (--retention-logs,
	// --retention-artifacts, "30d" or "36h"); empty keeps them.
	Logs, Artifacts string
	// ArchiveLogsAfter is how long after an attempt ended its log lines
	// move from the database to the object store (--archive-logs-after);
	// negative: the default (1h with an S3 store, never with the
	// filesystem store), 0: never.
	ArchiveLogsAfter time.Duration
	// SweepInterval is the time between sweeps (--sweep-interval).
	SweepInterval time.Duration
	// SweepBatch bounds the rows one sweep transaction touches.
	SweepBatch int
}

// Periods parses Logs and Artifacts (0: kept).
func (r Retention) Periods() (logs, artifacts time.Duration, err error) {
	if r.Logs != "" {
		if logs, err = catalog.ParseRetention(r.Logs); err != nil {
			return 0, 0, &FieldError{Field: "--retention-logs", Message: err.Error()}
		}
	}
	if r.Artifacts != "" {
		if artifacts, err = catalog.ParseRetention(r.Artifacts); err != nil {
			return 0, 0, &FieldError{Field: "--retention-artifacts", Message: err.Error()}
		}
	}
	return logs, artifacts, nil
}

// Validate names the first bad field.
func (r Retention) Validate() error {
	if _, _, err := r.Periods(); err != nil {
		return err
	}
	if r.SweepInterval != 0 && r.SweepInterval < time.Second {
		return &FieldError{Field: "--sweep-interval", Message: "must be at least 1s"}
	}
	if r.SweepBatch < 0 || r.SweepBatch > 10000 {
		return &FieldError{Field: "--sweep-batch", Message: fmt.Sprintf("%d: must be between 1 and 10000", r.SweepBatch)}
	}
	return nil
}
