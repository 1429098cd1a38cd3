// Package lease holds the run lease rules: it renders a job's lease keys for
// one run, and its Service checks, takes and releases them.
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
// The lease is a liveness hint; the fencing token is the proof. Rendering
// is pure. The Service applies the rules in the caller's transaction (the
// run service's request, claim and end of an attempt) over the narrow Tx
// it declares, in one lock order (keyorder.go), and answers people and
// downstream systems (show, verify, break-glass release); the statements
// themselves live in the store.
package lease
