// Package control is the run service: it requests, cancels and lists runs, and
// implements the runner side of the lifecycle — claim, renew, logs,
// relinquish, result — plus the reaper that expires unrenewed leases and
// schedules retries.
//
// Every transition is one store transaction that re-reads the rows it changes
// under a lock (FOR UPDATE on PostgreSQL; SQLite serializes writers) and
// appends its audit event, so a reaper acting on a stale snapshot, a late call
// from an old attempt or two concurrent results can never both win. Only the
// run's current attempt may change the run: a call naming another attempt, a
// lease token whose digest does not match, or a lease past its expiry is
// refused with attempt_stale or lease_expired.
//
// Time comes from the injected clock; when it is the real clock the store
// uses the database's statement clock (see package store).
package control
