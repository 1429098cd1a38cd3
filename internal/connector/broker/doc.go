// Package broker releases connector credentials to attempts and revokes
// the ones it minted.
//
// A run receives only the connectors its job declares, at the level its
// decision grants (Level: write only when declared and granted, else read),
// bound to the run's channel. Two types exist:
//
//   - static: the binding's read or write set of named secrets, released as
//     JOBPLANE_CONNECTOR_<NAME>_<KEY>. Nothing is minted, so nothing is
//     recorded or revoked; rotating the secret is the owner's business.
//   - postgres: the broker logs in with the binding's admin DSN (a secret)
//     and mints a login role per attempt and connector (RoleName), with a
//     random password, VALID UNTIL the attempt's deadline and membership in
//     only the binding's read or write role, and hands the job a DSN for it.
//     The role is recorded as a store.Credential before it is created, and
//     Revoke drops it once the attempt has ended or its lease has run out —
//     the same call serves the normal end and the reaper, so a worker that
//     dies still has its roles dropped. VALID UNTIL bounds the damage if the
//     reaper cannot reach the database.
//
// Secret values are opened with creds.Box under creds.SecretAD(tenant, name,
// channel), trying the run's channel first and then the all-channels value.
// No value ever appears in an error: errors name connectors, channels,
// secrets and roles only, and database errors are passed through a
// redact.Masker of the values involved. Issued.Secrets lists every value
// handed out so the caller can mask the attempt's logs. The minted password
// is sent to PostgreSQL as a SCRAM-SHA-256 verifier, so even the server's
// statement log never sees it.
//
// The admin role needs CREATEROLE and, on PostgreSQL 16 and later, ADMIN
// OPTION on the read and write roles it grants; it also needs to be able to
// terminate the minted role's sessions (PostgreSQL 16 gives a role's creator
// that right; earlier versions need pg_signal_backend or membership).
// Revoke waits for terminated sessions to exit, which needs PostgreSQL 14.
//
// The store is reached through the narrow interfaces SecretReader and
// CredentialStore; store.Store satisfies both.
package broker
