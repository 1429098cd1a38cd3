// Package sqlite is the embedded store: one file, WAL, one writer at a time.
//
// It is what `jobplane dev` and single-node installs run on, so it must keep
// the same semantics as the PostgreSQL store without its machinery: writers
// are serialized (BEGIN IMMEDIATE behind an in-process gate), which is what
// makes the claim a plain UPDATE, and wake-ups are an in-process broadcast
// after commit instead of LISTEN/NOTIFY.
//
// Times are INTEGER unix microseconds UTC, the precision PostgreSQL keeps, so
// that both stores round-trip the same values; "now" is the database clock
// unless the caller passes one.
package sqlite
