package store

import (
	"context"
	"time"
)

// ---- GitHub App ----

// GitHub installation statuses.
const (
	GitHubInstallationActive    = "active"
	GitHubInstallationSuspended = "suspended"
	GitHubInstallationDeleted   = "deleted"
)

// GitHubInstallation binds a GitHub App installation to its tenant.
type GitHubInstallation struct {
	ID                  int64 // GitHub's installation ID
	Tenant              string
	Account             string // the account's login
	AccountType         string // Organization | User
	RepositorySelection string // all | selected
	Status              string
	CreatedAt           time.Time // zero: now
	UpdatedAt           time.Time // zero: now
}

// GitHubRepo is a repository an installation grants access to.
type GitHubRepo struct {
	InstallationID int64
	RepoID         int64
	FullName       string // owner/name
	Private        bool
	AddedAt        time.Time // zero: now
}

// GitHubDelivery is a webhook delivery that has been processed.
type GitHubDelivery struct {
	ID             string // X-GitHub-Delivery
	Event          string
	Action         string
	InstallationID int64
	ProcessedAt    time.Time // zero: now
}

// GitHubCheckRun is the Check Run that mirrors one jobplane run.
type GitHubCheckRun struct {
	RunID          string
	Tenant         string
	InstallationID int64
	Repo           string // owner/name
	HeadSHA        string
	Name           string
	CheckRunID     int64     // GitHub's ID, 0 until created
	CreatedAt      time.Time // zero: now
}

// GitHubCheckUpdate is one state of a Check Run to write to GitHub (an
// outbox entry). Each entry carries the whole state, so only the newest
// unsent entry of a run needs sending.
type GitHubCheckUpdate struct {
	Seq           int64 // assigned
	RunID         string
	Tenant        string
	Status        string
	Conclusion    string
	Title         string
	Summary       string
	At            time.Time // when the state was reached (started or completed at)
	Attempts      int
	NextAttemptAt time.Time // zero: now
	LastError     string
	SentAt        *time.Time
	CreatedAt     time.Time // zero: now
}

// GitHubCheckClaimParams claim due outbox entries.
type GitHubCheckClaimParams struct {
	Now   *time.Time
	Limit int // runs
	// Hold is how long claimed entries stay invisible to other claimers; a
	// dispatcher that dies mid-send is replaced after it.
	Hold time.Duration
}

// GitHubQueries are the GitHub methods of Queries.
type GitHubQueries interface {
	// GitHubCheckClaim takes up to Limit runs that have a due unsent update
	// (oldest due first), pushes the next attempt of all their unsent
	// updates to now + Hold, and returns each run's newest unsent update.
	GitHubCheckClaim(ctx context.Context, p *GitHubCheckClaimParams) ([]*GitHubCheckUpdate, error)
	// GitHubCheckMarkSent marks a run's unsent updates with Seq <= upTo sent;
	// lastError is kept on them when they were given up rather than sent.
	GitHubCheckMarkSent(ctx context.Context, runID string, upTo int64, lastError string, now *time.Time) error
	// GitHubCheckRetry counts a failed send of a run's unsent updates with
	// Seq <= upTo and schedules the next attempt.
	GitHubCheckRetry(ctx context.Context, runID string, upTo int64, next time.Time, lastError string) error
	// GitHubCheckRunCreate records a run's Check Run (ErrAlreadyExists).
	GitHubCheckRunCreate(ctx context.Context, c *GitHubCheckRun) error
	// GitHubCheckRunListOpen lists the Check Runs of an installation whose
	// runs have not ended (pending approval, queued or running), by run ID.
	GitHubCheckRunListOpen(ctx context.Context, installationID int64) ([]*GitHubCheckRun, error)
	// GitHubCheckRunGet reads a run's Check Run.
	GitHubCheckRunGet(ctx context.Context, runID string) (*GitHubCheckRun, error)
	// GitHubCheckRunSetID records GitHub's ID of a run's Check Run.
	GitHubCheckRunSetID(ctx context.Context, runID string, checkRunID int64) error
	// GitHubCheckUpdateAppend queues an update; Seq is assigned.
	GitHubCheckUpdateAppend(ctx context.Context, u *GitHubCheckUpdate) error
	// GitHubCheckUpdateList lists a run's updates in order.
	GitHubCheckUpdateList(ctx context.Context, runID string) ([]*GitHubCheckUpdate, error)

	// GitHubDeliveryGet reads a processed delivery.
	GitHubDeliveryGet(ctx context.Context, id string) (*GitHubDelivery, error)
	// GitHubDeliveryPurge forgets deliveries processed before a time.
	GitHubDeliveryPurge(ctx context.Context, before time.Time) (int, error)
	// GitHubDeliveryRecord records a delivery as processed;
	// ErrAlreadyExists when it already was. On PostgreSQL a concurrent
	// uncommitted record of the same ID makes it wait for that
	// transaction's outcome, so of concurrent copies exactly one proceeds.
	GitHubDeliveryRecord(ctx context.Context, d *GitHubDelivery) error

	// GitHubInstallationGet reads an installation's binding.
	GitHubInstallationGet(ctx context.Context, id int64) (*GitHubInstallation, error)
	// GitHubInstallationGetByTenant reads the installation bound to a tenant.
	GitHubInstallationGetByTenant(ctx context.Context, tenant string) (*GitHubInstallation, error)
	// GitHubInstallationList lists every installation binding by ID.
	GitHubInstallationList(ctx context.Context) ([]*GitHubInstallation, error)
	// GitHubInstallationPut creates or updates a binding (Account,
	// AccountType, RepositorySelection, Status, UpdatedAt; the tenant of an
	// existing binding never changes).
	GitHubInstallationPut(ctx context.Context, in *GitHubInstallation) error

	// GitHubRepoDelete removes a repository from an installation
	// (ErrNotFound when it was not there).
	GitHubRepoDelete(ctx context.Context, installationID, repoID int64) error
	// GitHubRepoList lists an installation's repositories by name.
	GitHubRepoList(ctx context.Context, installationID int64) ([]*GitHubRepo, error)
	// GitHubRepoPut adds a repository or updates its name and visibility.
	GitHubRepoPut(ctx context.Context, r *GitHubRepo) error
}
