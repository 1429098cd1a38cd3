// Package groupcommit is a store.Store whose transactions are shared: the
// calls waiting for one at a moment run their bodies one after another in
// ONE transaction and commit together, and each caller is answered only
// after that commit. The number of transactions per run, not the SQL,
// bounds a server's throughput: a claim, a result, a renewal, a log chunk,
// a run request and the nonce of a signed request each cost a commit
// alone.
//
// Running bodies back to back in one transaction is the same as running
// them serially and committing each: a body sees the writes of the bodies
// before it, row locks are the transaction's own, and PostgreSQL's
// clock_timestamp() or the Go clock gives each body its own time. What a
// shared transaction changes is failure: when one body fails, the
// transaction is rolled back, the bodies before it are run again as a
// group, the failing body gets its own error (it failed after those
// bodies, as it would have serially), and the bodies after it are run as
// another group. A failed COMMIT fails every body of the group, as it
// would have failed each of them.
//
// The bodies' transaction is the store's, wrapped: it remembers for the
// group which claim scopes found nothing (so that a herd of idle runners
// costs one claim query, not one each), and it notes a body that took,
// checked or released lease keys, after which the group ends (see Store).
// Callers only use the store.Store interface; InTxNonce hands a signed
// request's pending nonce in, and the nonces of a group go in one
// statement ahead of its bodies.
package groupcommit
