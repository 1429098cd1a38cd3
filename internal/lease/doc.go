// Package lease renders a job's run lease keys for one run.
//
// A run lease is time-bounded mutual exclusion on a key such as
// schema-migration:prod or backfill:account:1001. The keys are rendered from
// the job's templates when the run is requested and stored on the run; they
// are acquired, all or none, in the same transaction that claims the run's
// attempt, expire with the attempt's lease (one renewal renews both), and are
// released when the attempt ends. Every acquisition gets the next value of
// the key's own fencing counter, allocated under the key's row lock, which a
// downstream system checks (POST /v1/leases/verify) so that a holder that
// was paused past its expiry is refused there even if it wakes up and acts.
//
// The lease is a liveness hint; the fencing token is the proof. This package
// is pure: rendering only. Acquisition lives in the store, the rules in
// internal/control.
package lease
