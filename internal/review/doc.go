// Package review is what a reviewer of a definitions repository runs before
// merging: Validate parses a commit (or a work tree) and runs its policy
// tests, and Diff tells what a change does to who may run what.
//
// Both work on the parsed catalog, never on the text: a policy test asks the
// same Decide the server asks, and Diff compares the decisions of the two
// sides, so reformatting a file or moving a rule between files is no change,
// while adding a member to a group shows every right the member gains.
//
// The package reads files (a directory or one Git commit) only in its
// loaders, ReadDir and ReadRevision; everything else is a pure function of
// bytes, so the CLI, tests and golden files all see the same output.
package review
