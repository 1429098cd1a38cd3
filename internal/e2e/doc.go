// Package e2e holds process-level end-to-end tests of jobplane.
//
// TestMain builds the real jobplane binary once (without -race, for speed)
// and the tests run it as separate operating-system processes: a control
// plane (`jobplane server`) on SQLite and on PostgreSQL, one or more
// execution agents (`jobplane worker`) and the CLI (`jobplane run --wait`,
// `jobplane cancel`), against a definitions repository made with real Git
// commits. Nothing is faked: faults are real signals to real processes.
//
// What the tests prove, through processes only:
//
//   - TestHappyPath: a run requested with the CLI is claimed by a worker,
//     executed, its log streamed back, and `run --wait` exits 0 and prints
//     the job's output; a failing job makes `run --wait` exit 1.
//   - TestWorkerKilledMidRun (acceptance case C3): a worker SIGKILLed mid-run
//     (and its job's process group with it; lease_ttl 3 s) stops renewing, the lease
//     expires by database time, the reaper makes attempt 2 and the other
//     worker runs it; attempt 1 ends `expired`; a late signed call for
//     attempt 1 from the dead worker's identity is refused with 409
//     (`attempt_stale` or `lease_expired`) and changes nothing.
//   - TestServerRestartMidRun (C10 at process level, with a real clock and
//     an 8 s job rather than 10×TTL): the server stopped twice (SIGTERM or
//     SIGKILL), each time for about a second, and restarted on the same port
//     and database while a job runs loses nothing: the worker reconnects,
//     keeps its lease (one attempt, never rescued), ships the rest of the
//     log exactly once and in order, and posts the result.
//   - TestMinimumLeaseTTL: a job with the minimum lease_ttl (2 s) that
//     renews on time runs to its end.
//   - TestWorkerRestartKeepsIdentity: a worker restarted with the same state
//     directory and no registration token keeps its runner identity and
//     still claims work; the server lists one runner, not two.
//   - TestCancelKillsProcessGroup: `jobplane cancel` of a running job ends
//     the run `cancelled` within seconds, and every process the job started
//     (its whole process group) is gone.
//
// Every test runs against SQLite and, when testdb finds one, PostgreSQL
// (JOBPLANE_TEST_POSTGRES, JOBPLANE_TEST_REQUIRE_POSTGRES as in testdb).
// Every wait is bounded; child processes are killed at cleanup and their
// output is printed when a test fails.
package e2e
