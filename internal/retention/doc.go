// Package retention deletes what the server keeps of ended runs once it is
// no longer wanted: the logs and artifacts of runs past their retention
// period, and the capability rows nothing can use any more (expired upload
// capabilities, uploads whose publish was interrupted, expired source
// tickets).
//
// One replica at a time sweeps: the Sweeper takes the system lease
// "retention" (store.SystemLeaseAcquire) at the start of a round and every
// batch it writes re-checks the lease's token in the same transaction
// (store.SystemLeaseCheck), so that a replica paused past the lease's
// expiry cannot write after another took over.
//
// A run's periods are fixed once, the first time a sweep sees the run
// ended: the job's `retention` as pinned in the run's spec, else the
// server's default at that moment (zero: kept). Deleting never touches the
// run, its attempts or its audit events: each deletion appends an audit
// event of its own ("run.logs_pruned", "run.artifacts_pruned") naming what
// went, and the hash chain, which covers only audit events, still verifies.
//
// Artifacts go in three steps so that nothing half-deleted is ever served:
// their rows become "deleting" (no longer listed or downloadable) in a
// transaction with the audit event, then the objects are deleted, then the
// rows. A sweep interrupted between the steps finishes the job in a later
// round, from the "deleting" rows.
package retention
