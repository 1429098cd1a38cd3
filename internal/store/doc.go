// Package store is the contract between jobplane's services and its databases:
// row types, parameter structs, sentinel errors and the Store interface. It holds
// no SQL; internal/store/sqlite and internal/store/postgres implement it, and
// internal/store/storetest is the one conformance suite both must pass.
//
// The store knows SQL, not policy: it reads and writes rows, locks them for the
// services' read-modify-write transactions, and does the two things only SQL
// can do well (claiming with SKIP LOCKED and listing expired leases).
//
// Time: every method that depends on "now" takes a nullable Now. When it is
// nil the store uses the database's statement clock (clock_timestamp() on
// PostgreSQL), so production has one clock; tests pass a fake time.
package store
