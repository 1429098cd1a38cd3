// Package s3test starts a real S3-compatible server (SeaweedFS) for tests.
//
// The server is built once from the tools module in tools/s3 (its own
// go.mod, so none of its hundreds of modules reach jobplane's) into a cache
// directory keyed by that module's go.sum, and reused by every later test
// run. A cold build takes several minutes on two cores: a test builds it
// only when its deadline leaves room, and otherwise skips with the command
// that builds it. Without the binary tests skip, unless
// JOBPLANE_TEST_REQUIRE_S3=1 (CI) makes that a failure.
//
// Every server listens on loopback ports chosen free at start, keeps its
// data in the test's temp dir, checks SigV4 signatures against one
// identity, and is stopped when the test (or, for Shared, the test binary)
// ends.
package s3test
