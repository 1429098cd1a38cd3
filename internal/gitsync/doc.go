// Package gitsync serves the catalog of each channel from a local Git
// repository of definitions: a channel maps to a branch, and its catalog is
// the newest commit of that branch that validated.
//
// A commit that does not validate never replaces a good one: the channel
// keeps serving the last good catalog this process has seen, and the
// rejection (commit and errors) is recorded so it can be shown to whoever
// pushed it. Catalogs are cached by commit, since a commit's content never
// changes; that also makes AtCommit, used for runs pinned to a commit, cheap.
//
// Only local repositories are read (a path or a file:// URL). Fetching from a
// remote is a separate concern: it would need credentials and retries, and
// keeping it out means a Resolve never waits on the network.
//
// InitRepo and CommitFiles write real repositories with go-git; `jobplane dev`
// uses them for its example repository and tests use them everywhere.
package gitsync
