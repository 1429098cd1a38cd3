// Package ciimport turns a team's existing CI configuration (GitHub Actions
// workflows, a GitLab CI pipeline) into the first draft of a jobplane
// definitions repository: `jobplane import`.
//
// The work is a pipeline of pure steps over bytes, so every output can be
// reproduced and reviewed as a diff:
//
//  1. parse (GitHub, GitLab): the CI files, read through an fs.FS, become an
//     Inventory: every job with its triggers, environment, secrets and
//     variables, concurrency group, commands, actions and runners. Problems
//     of the input are collected with file, line and column, all of them,
//     and never stop the rest of the inventory: a broken workflow is
//     reported and the other workflows are still inventoried.
//  2. classify (Classify): each job is build/test, operational or data
//     movement, with the evidence for the decision and a confidence.
//     Overrides from a small reviewed file (ParseOverrides) win, so the
//     import can be repeated as the CI changes without losing decisions.
//  3. write (Write): the operational and data-movement jobs become jobs,
//     policies, groups, connectors, runbooks and policy tests that
//     `jobplane validate` accepts; Report explains, per job, what moved and
//     what is left, and lists the long-lived secrets still in use.
//
// Nothing here reads a clock or the network, and every list is sorted, so
// the same input gives byte-for-byte the same output.
//
// GitHub workflows are parsed with github.com/rhysd/actionlint's parser,
// which knows the workflow syntax and keeps positions; its expression parser
// finds the ${{ }} references to inputs, secrets and variables. GitLab files
// are walked as a goccy/go-yaml syntax tree (with the budgets of package
// yamlpos), since GitLab's own extensions (anchors with merge keys,
// !reference, extends, include) have no Go parser of their own.
package ciimport
