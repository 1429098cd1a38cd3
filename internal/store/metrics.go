package store

import (
	"context"
	"time"
)

// Count is one group of a GROUP BY count.
type Count struct {
	Job   string // runs only
	State string
	Pool  string // queue depth only
	N     int64
}

// RunnerSeen is a runner's last contact, for the heartbeat-age gauge.
type RunnerSeen struct {
	ID         string
	Pool       string
	Status     string
	LastSeenAt *time.Time
}

// Gauges is what the metrics endpoint reads from the database at scrape
// time, across tenants: counts that must agree on every replica cannot be
// kept in one process's memory.
type Gauges struct {
	Runs        []Count // by job and state
	Attempts    []Count // by state
	QueueDepth  []Count // claimable queued attempts by pool (not before now, not blocked)
	LeaseWaits  int64   // queued attempts blocked on a lease key
	Runners     []RunnerSeen
	AuditHead   int64 // last sealed sequence number, 0 if none
	AuditLatest int64 // last committed event, 0 if none
}

// MetricsQueries are the metrics methods of Queries.
type MetricsQueries interface {
	// MetricsGauges counts runs, attempts, the queue and lease waiters, and
	// lists runners' last contact; now is the queue's "due" cut-off.
	MetricsGauges(ctx context.Context, now *time.Time) (*Gauges, error)
}
