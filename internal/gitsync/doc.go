// Package gitsync serves the catalog of each channel from a Git repository
// of definitions: a channel maps to a branch (or, for a pattern channel such
// as sandbox=feature/*, to every branch matching the pattern), and its
// catalog is the active commit: the newest commit of the branch whose whole
// tree validated.
//
// A commit that does not validate never replaces a good one: the channel
// keeps serving its last good catalog, and the rejection (commit, author,
// time and every error with file, line and column) is kept so it can be shown
// to whoever pushed it. The last good commit lives in memory here; the server
// persists it in the store and hands it back with Seed after a restart, so a
// bad head is never served even by a fresh process. Without a seed, the first
// Resolve of a bad head walks back the branch's first-parent history to the
// newest commit that validates. Catalogs are cached by commit, since a
// commit's content never changes; that also makes AtCommit, used for runs
// pinned to a commit, cheap.
//
// Where the repository lives decides how it is read:
//
//   - a local path (bare or not) is read in place on every Resolve: no copy,
//     and a commit is visible the moment it is made;
//   - a URL (https://, ssh://, git://, user@host:path, and file:// when a
//     mirror directory is given) is cloned bare into Options.MirrorDir and
//     refreshed by Sync (force, prune: a force-push or a deleted branch is
//     mirrored as is). Resolve reads only the mirror, so it never waits on the
//     network. file:// goes through go-git's in-process transport, which this
//     package registers, so no git binary is needed.
//
// InitRepo and CommitFiles write real repositories with go-git; `jobplane dev`
// uses them for its example repository and tests use them everywhere.
package gitsync
