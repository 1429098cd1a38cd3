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
//  3. verify: every run this benchmark created is listed through the API and
//     must have succeeded on its first and only attempt, and no run was
//     claimed twice or claimed that this benchmark did not create.
//
// The figures are rates (operations per second of wall time) and latency
// percentiles of the calls as the client sees them. Nothing is simulated:
// each request is signed, authenticated, nonce-checked and committed exactly
// as a real runner's would be, so the figures bound what one server process
// on this machine can do for no-op runs. The job never executes; a real
// worker adds process start-up, log upload and lease renewal on top.
//
// The package is built to grow into the full `jobplane bench` (a
// lifecycle phase, overlapping request and claim load, transactions per
// run, a --raw comparison against the store without HTTP): phases are
// separate methods of [Env] that return a [Phase], and [Result] gains
// fields without changing the existing ones.
package bench
