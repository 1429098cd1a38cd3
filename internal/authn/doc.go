// Package authn turns credentials into identities: API bearer tokens into
// principals, and Ed25519-signed runner requests into verified calls.
//
// Runner verification follows the protocol's order exactly and fails closed:
// signature (which needs the runner's registered key) → timestamp skew →
// nonce replay (a durable unique row, so exactly one of N concurrent copies
// wins and a restart forgets nothing) → runner disabled. The path that is
// verified is the raw path as sent, and only paths that every layer reads the
// same way are accepted, so the route dispatched is the route signed.
//
// A hot route may take the nonce pending (VerifyRunnerDeferred) and record
// it in the first transaction it commits; PendingNonce is how the group
// committer and the answer writer learn whether that happened.
package authn
