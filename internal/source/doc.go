// Package source is the source broker: it keeps mirrors of the code
// repositories the server is configured with (--source-repo NAME=URL),
// pins a branch head to a commit when a run is requested, and writes a
// gzipped tar of exactly that commit for a redeemed source ticket.
//
// The archive is read from the server's own mirror, never from a path or
// ref the runner names: the commit comes from the run, and its object is
// re-hashed before anything is written, so what is streamed is the commit
// the run was pinned to. The entries follow `git archive`: directories,
// regular files (0664, or 0775 when executable, as git archive with its default umask 002), symlinks, and an empty
// directory for a submodule, in tree order.
package source
