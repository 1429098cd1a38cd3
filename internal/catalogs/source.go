package catalogs

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/protocol"
)

// Source is implemented by Definitions read from a repository: it lists
// what each channel serves, fetches, and takes back the active commits
// persisted before a restart. Definitions without it (test fakes) simply
// have no catalog API.
type Source interface {
	control.CatalogSource
	// Sync fetches the repository (a no-op when it is read in place).
	Sync(ctx context.Context) error
	// Observe resolves every channel and every branch of pattern channels.
	Observe(ctx context.Context) []ChannelObservation
	// Seed restores a persisted active commit of a channel's branch.
	Seed(channel, branch, commit string) error
}

// JobCatalog is implemented by a Catalog that can describe its jobs.
type JobCatalog interface {
	control.Catalog
	// Jobs lists every job (without runbook text), by name.
	Jobs() []protocol.JobInfo
	// Describe returns one job with its runbook rendered as plain text.
	Describe(name string) (protocol.JobInfo, bool)
	// Principals lists every principal the definitions name (group members
	// and users of rules), sorted.
	Principals() []string
}

// ChannelObservation is what a channel's branch serves now.
type ChannelObservation struct {
	Channel string
	Branch  string
	Head    string
	Active  *CommitInfo // nil when no commit of the branch validates
	// Rejected are the rejected commits the source has seen, oldest first.
	Rejected []RejectedCommit
	// Err says why the branch could not be read (missing branch, say).
	Err string
}

// CommitInfo names a commit, its author and its commit time.
type CommitInfo struct {
	Commit string
	Author string
	At     time.Time
}

// RejectedCommit is a commit that did not validate, with every error.
type RejectedCommit struct {
	CommitInfo
	Errors []protocol.CatalogError
}
