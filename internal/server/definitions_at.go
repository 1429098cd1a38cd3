package server

import (
	"github.com/jobplane/jobplane/internal/catalogs"
	"github.com/jobplane/jobplane/internal/gitsync"
)

// AtCommit returns the definitions of an exact commit, as a run pinned to it
// sees them (catalogs.CommitDefinitions).
func (d *definitions) AtCommit(channel, branch, commit string) (catalogs.JobCatalog, error) {
	cat, err := d.src.AtCommit(commit)
	if err != nil {
		return nil, err
	}
	return &pinned{src: d.src, snap: &gitsync.Snapshot{Channel: channel, Branch: branch, Commit: commit, Head: commit,
		Protected: d.src.Protected(branch), Catalog: cat}}, nil
}
