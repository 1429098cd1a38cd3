package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// ---- retention and system leases ----

// SystemLease elects one holder of a cross-tenant task among the replicas
// (the retention sweep). Token grows by one with every new holder.
type SystemLease struct {
	Name      string
	Holder    string
	Token     int64
	ExpiresAt time.Time
}

// ArtifactDeleting is the state of an artifact whose bytes are being
// deleted: it is never listed or served again, and the row goes once the
// object has.
const ArtifactDeleting ArtifactState = "deleting"

// EndedRun is a run that ended and has no RunRetention yet.
type EndedRun struct {
	ID         string
	Tenant     string
	Job        string
	FinishedAt time.Time
	Spec       json.RawMessage
}

// RunRetention is when an ended run's logs and artifacts are due for
// deletion (nil: kept) and when they were deleted.
type RunRetention struct {
	RunID             string
	Tenant            string
	Job               string
	FinishedAt        time.Time
	LogsDueAt         *time.Time
	ArtifactsDueAt    *time.Time
	LogsPrunedAt      *time.Time
	ArtifactsPrunedAt *time.Time
}

// LogArchiveState is where a LogArchive is in its life.
type LogArchiveState string

// LogArchive states.
const (
	// LogArchiveMoving: the object is published; some of its lines may
	// still be in the database too (a reader takes one copy of each).
	LogArchiveMoving LogArchiveState = "moving"
	// LogArchiveStored: the object holds the attempt's lines, the database
	// none of those.
	LogArchiveStored LogArchiveState = "stored"
	// LogArchiveDeleting: retention is deleting the object; never served.
	LogArchiveDeleting LogArchiveState = "deleting"
)

// LogBlock is one independently compressed part of a LogArchive's object.
type LogBlock struct {
	FirstID int64 // the ID of its first line
	Offset  int64 // where it starts in the object
	Lines   int   // how many lines it holds
	Raw     int64 // its size uncompressed
}

// LogArchive is an attempt's log lines moved to the object store: one
// object under Key holding the lines FirstID..LastID (IDs as in log_lines,
// the cursor of the logs API) in ID order.
type LogArchive struct {
	AttemptID string
	RunID     string
	Tenant    string
	Key       string
	FirstID   int64
	LastID    int64
	Lines     int64
	Size      int64  // the object's size
	SHA256    string // of the object
	Blocks    []LogBlock
	State     LogArchiveState
	CreatedAt time.Time
}

// RetentionKind names what of a run retention deletes.
type RetentionKind string

// Retention kinds.
const (
	RetainLogs      RetentionKind = "logs"
	RetainArtifacts RetentionKind = "artifacts"
)

// RetentionQueries are the retention sweep's methods of Queries. They are
// cross-tenant: call them with a WithSystem context.
type RetentionQueries interface {
	// SystemLeaseAcquire grants the named lease to holder for ttl when it is
	// free, expired or already holder's (a renewal keeps the token; a new
	// holder gets the next one). ErrNotFound while another holds it.
	SystemLeaseAcquire(ctx context.Context, name, holder string, ttl time.Duration, now *time.Time) (*SystemLease, error)
	// SystemLeaseCheck locks the lease for the rest of the transaction if
	// token still holds it unexpired, else ErrNotFound: a write after it
	// in the same transaction is fenced.
	SystemLeaseCheck(ctx context.Context, name string, token int64, now *time.Time) error
	// SystemLeaseRelease ends the lease if token still holds it.
	SystemLeaseRelease(ctx context.Context, name string, token int64) error

	// RetentionWatermark is the latest FinishedAt of any RunRetention
	// (zero when none).
	RetentionWatermark(ctx context.Context) (time.Time, error)
	// RunsEndedUnstamped lists runs that finished at or after since and have
	// no RunRetention, oldest first.
	RunsEndedUnstamped(ctx context.Context, since time.Time, limit int) ([]*EndedRun, error)
	// RetentionStamp records r; a run stamped already keeps its row.
	RetentionStamp(ctx context.Context, r *RunRetention) error
	// RetentionDue lists the runs whose kind is due at now and not yet
	// deleted, earliest due first.
	RetentionDue(ctx context.Context, kind RetentionKind, now *time.Time, limit int) ([]*RunRetention, error)
	// RetentionMarkPruned records that a run's kind was deleted
	// (ErrNotFound without a RunRetention).
	RetentionMarkPruned(ctx context.Context, runID string, kind RetentionKind, now *time.Time) error

	// RunsLogsUnarchived lists stamped runs that ended at or before
	// endedBefore whose logs are neither archived nor pruned nor due at
	// now, oldest first.
	RunsLogsUnarchived(ctx context.Context, endedBefore time.Time, now *time.Time, limit int) ([]*RunRetention, error)
	// RetentionMarkArchived records that a run's logs finished moving
	// (ErrNotFound without a RunRetention).
	RetentionMarkArchived(ctx context.Context, runID string, now *time.Time) error
	// LogListAttempt lists at most limit lines of one attempt of a run with
	// ID > after, in ID order.
	LogListAttempt(ctx context.Context, runID, attemptID string, after int64, limit int) ([]*LogLine, error)
	// LogDeleteArchived deletes at most limit lines of an attempt of a run
	// with ID <= upTo and says how many.
	LogDeleteArchived(ctx context.Context, runID, attemptID string, upTo int64, limit int) (int, error)
	// LogArchiveCreate records a; ErrAlreadyExists when the attempt has one.
	LogArchiveCreate(ctx context.Context, a *LogArchive) error
	// LogArchiveSetState sets an archive's state (ErrNotFound without one).
	LogArchiveSetState(ctx context.Context, attemptID string, state LogArchiveState) error
	// LogArchiveMarkDeleting moves every archive of a run to
	// LogArchiveDeleting and returns them (those already deleting too).
	LogArchiveMarkDeleting(ctx context.Context, runID string) ([]*LogArchive, error)
	// LogArchiveDelete drops an archive's row.
	LogArchiveDelete(ctx context.Context, attemptID string) error

	// LogPrune deletes at most limit of a run's log lines and says how many.
	LogPrune(ctx context.Context, runID string, limit int) (int, error)
	// ArtifactMarkDeleting moves at most limit of a run's stored artifacts
	// to ArtifactDeleting and returns them.
	ArtifactMarkDeleting(ctx context.Context, runID string, limit int) ([]*Artifact, error)
	// ArtifactListStale lists at most limit artifact rows nothing will
	// complete: pending ones whose capability expired before now,
	// uploading ones created before uploadingBefore (a publish that was
	// interrupted), and deleting ones, oldest first.
	ArtifactListStale(ctx context.Context, uploadingBefore time.Time, now *time.Time, limit int) ([]*Artifact, error)
	// SourceTicketPurge deletes at most limit source tickets that expired
	// before now and says how many.
	SourceTicketPurge(ctx context.Context, now *time.Time, limit int) (int, error)
}

// MarshalLogBlocks encodes blocks as the stores keep them: a JSON array
// of [first id, offset, lines, raw] arrays.
func MarshalLogBlocks(blocks []LogBlock) ([]byte, error) {
	out := make([][4]int64, len(blocks))
	for i, b := range blocks {
		out[i] = [4]int64{b.FirstID, b.Offset, int64(b.Lines), b.Raw}
	}
	return json.Marshal(out)
}

// UnmarshalLogBlocks decodes what MarshalLogBlocks encoded.
func UnmarshalLogBlocks(b []byte) ([]LogBlock, error) {
	var in [][4]int64
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("log archive blocks: %w", err)
	}
	out := make([]LogBlock, len(in))
	for i, x := range in {
		out[i] = LogBlock{FirstID: x[0], Offset: x[1], Lines: int(x[2]), Raw: x[3]}
	}
	return out, nil
}

// SortLogArchives orders archives by their first line.
func SortLogArchives(as []*LogArchive) {
	slices.SortFunc(as, func(a, b *LogArchive) int { return cmp.Compare(a.FirstID, b.FirstID) })
}
