// Package testdb gives tests of every package a fresh, migrated store.
//
// SQLite stores live in the test's temp dir. PostgreSQL stores share one
// database but each gets its own schema (search_path), so tests and packages
// running in parallel never see each other's rows, and a schema is cheap to
// drop. Without a reachable PostgreSQL the PostgreSQL variants skip, unless
// JOBPLANE_TEST_REQUIRE_POSTGRES=1 makes that a failure (CI sets it).
package testdb
