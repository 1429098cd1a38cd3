// Package audit seals the audit log into a hash chain and verifies it.
//
// Writers append events in the transaction of the change they record
// (control's s.audit → store.AuditAppend) and never touch the chain, so no
// request waits on a shared head row. A Sealer, running in every server
// replica, links committed events in sequence order some time later: link n
// is SHA-256 over link n−1 and the canonical encoding of event n (Encode).
// Sealers of several replicas take turns on a lock that writers never take,
// and a link per sequence number is unique, so the chain cannot fork.
//
// Sequence numbers are drawn before commit, so on PostgreSQL an event can
// commit after a higher-numbered one was already visible. The sealer
// therefore seals only up to a horizon below which no transaction can still
// commit (store.AuditHorizon); a number below the horizon that never shows up
// was rolled back and is skipped. An event that appears below the sealed head
// later was not written by the server: Verify reports it.
//
// Verify recomputes the chain from the stored rows and names the first event
// that does not fit: altered, deleted, reordered, or inserted. A superuser
// who rewrites events and recomputes every link produces a consistent chain;
// only a head kept outside the database (a Checkpoint: sequence number and
// hash, printed by `jobplane audit verify`) shows that. docs/operations.md
// describes the encoding and the checkpoint routine for operators.
package audit
