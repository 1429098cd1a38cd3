// Package catalog parses and validates a definitions repository (jobs, policies,
// groups) into an immutable Catalog, and answers the questions the control plane
// asks of it: does a job exist, are these parameters valid, may this actor run
// this job in this channel.
//
// The package is pure: it reads no files, no clock and no network, so a catalog
// is a function of the bytes of one commit and every decision it makes can be
// replayed. Reading Git is the job of package gitsync.
//
// Parse reports every problem it finds, each with file, line and column, rather
// than stopping at the first: a reviewer fixing a pull request wants the whole
// list at once. A catalog with any error is not returned at all, so a
// half-valid commit can never authorize anything.
//
// The YAML is walked as a syntax tree (package yamlpos) instead of being
// unmarshalled into structs. That is what lets unknown keys, wrong types and
// out-of-range values all be reported together with their positions, and it
// keeps hostile input (alias bombs, deep nesting, huge files) under explicit
// budgets instead of relying on the decoder's.
//
// Policy rules are parsed here, with their positions, and compiled by package
// policy while the commit is parsed: a `when` that does not type-check, an
// unknown time zone or a bad grant level is an error of the commit, at the
// line and column where it is written, and Decide delegates to the compiled
// policy. The policy types (Rule, Request, Decision, ...) are aliases of
// package policy's.
package catalog
