// Package policy decides whether a request to run a job is authorized, and
// with which approvals and connector grants.
//
// It works in three phases. The catalog parses the YAML of a commit into
// Rules (package catalog owns the file format and source positions);
// CompileRule validates each rule and compiles its CEL `when` and its `hours`
// window once, when the commit is loaded, so that a condition that does not
// type-check fails validation of the commit instead of failing requests; New
// assembles the compiled rules and groups into a Policy; Decide answers one
// Request.
//
// The package is pure: no I/O and no clock. Now is part of the Request so a
// decision can be replayed. The one exception is loading a time zone at
// compile time, which reads the zoneinfo database (embedded with time/tzdata
// as a fallback); it happens at validation, never in Decide.
//
// Semantics, as docs/definitions.md states them: default deny; a nil or empty Policy
// denies; any matching deny rule denies; otherwise the request is allowed if
// an allow rule matches. Among matching allow rules the decision takes the one
// requiring the fewest approvals, then the one granting the most (the most
// write grants, then the most grants in total), then the first in priority
// order (file path, then position). The decision's grants are exactly the
// chosen rule's grants, never a union, so adding a rule can change which
// grants a request gets but never combine them.
//
// A `when` that fails at evaluation (a missing map key, a wrong type, the
// cost budget exceeded) counts as false and the trace says why. For an allow
// rule that fails closed. For a deny rule it means the deny does not apply,
// which is what the definitions specify; authors of deny conditions should
// guard map lookups with `has()` or `in`.
//
// Performance: rules are compiled once per catalog; the CEL activation is
// built at most once per decision, lazily, and shared by all rules; the trace
// reasons of all rules are written into one buffer.
package policy
