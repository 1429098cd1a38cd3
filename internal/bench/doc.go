// Package bench measures jobplane's throughput end to end, through the
// published HTTP API, against a real in-process server and a real store.
//
// An [Env] is a disposable control plane: a server on a free loopback port,
// a temporary data directory, a temporary definitions repository holding one
// no-op job ("noop", command ["true"]) and a policy that lets anyone run it,
// and an admin API client. [Run] drives one measurement in phases:
//
//  1. request: Clients goroutines create Runs runs with POST /v1/runs;
//  2. claim+result: Workers runner identities, each registered with its own
//     single-use registration token and Ed25519 key, loop claim (wait 0) →
//     result (succeeded) until the queue is empty;
//  3. lifecycle: runs requested while every runner waits in a long-polling
//     claim; each is claimed, renewed, logged and finished;
//  4. dispatch: runs requested one at a time with every runner idle, for
//     request→claimed latency;
//  5. verify: every run of every phase is read back through the API and
//     must have succeeded on its first and only attempt, claimed exactly
//     once, and no run the benchmark did not create was claimed;
//  6. raw (optional): a bare SKIP LOCKED claim+complete loop on the same
//     database, one row per transaction and then a batch per statement, so
//     that jobplane's rates can be printed as ratios measured in one run.
//
// Two modes replace the phases: a backlog of bulk-inserted queued runs
// (claim latency with a small and a big queue, and EXPLAIN ANALYZE of the
// claim statement), and N idle runners in long polls (memory, then dispatch
// latency). [RunRounds] repeats the phases, each round on a database of its
// own, and reports each figure's median and range. The figures are rates, latency percentiles of the calls as the
// client sees them, this process's CPU per run and the store's commits per
// run. Nothing is simulated: each request is signed, authenticated,
// nonce-checked and committed exactly as a real runner's would be. The job
// never executes; a real worker adds process start-up and its own output.
package bench
