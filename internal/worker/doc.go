// Package worker is the runner agent behind `jobplane worker`: it keeps a
// runner identity, claims attempts, runs each through an executor (a child
// process by default; see internal/executor), streams its output, renews the
// attempt's lease and reports the result, speaking to the server only
// through apiclient and the published protocol.
//
// # Identity
//
// On first start the worker makes an Ed25519 key (StateDir/runner.key, the
// base64url seed, mode 0600) and registers it with the single-use
// registration token, recording the runner ID in StateDir/runner.json. A
// restart reuses both and never registers again.
//
// # Claims
//
// A worker with one slot long-polls the claim endpoint for one attempt at a
// time. A worker with several asks, in one long poll, for as many attempts as
// slots are free (the claim's "max") and runs each in a slot. A claim whose answer
// was lost (transport error, 5xx, 503 retry) is repeated with the same
// request_id, so the server hands back the assignments it already leased
// instead of leaking it; a new claim gets a new request_id. An unreachable
// server is retried with capped exponential backoff and jitter, so the worker
// survives server restarts.
//
// # Trust window
//
// The server alone decides whether a lease is valid, by its own clock. The
// worker only decides when to stop trusting that it still holds the lease,
// from its own monotonic clock and never from server wall time: after every
// successful renew (and at the claim), it trusts the lease until
//
//	(time the request was sent) + TTL − max(1 s, TTL/10)
//
// and never beyond the job deadline, computed the same way from the claim's
// send time plus timeout_seconds. Starting the clock before the request is
// sent makes any latency or server delay shorten the window, never lengthen
// it. Renewals happen every third of the trust window and transient failures are retried until
// the window ends. At the window's end the process group is killed and the
// worker sends nothing more for the attempt: by then the server may already
// have given the run to another runner. A 409 lease_expired or attempt_stale
// answer means the same, immediately (SIGKILL, no result).
//
// # Stopping a job
//
// A job is stopped through its executor: SIGTERM (or its equivalent), then
// a kill after a grace period that never runs past the trust window, or a
// kill at once when the lease is lost. Each new end of the trust window is
// handed to the executor too (executor.Job.Extend). Reasons (cancel requested, timed out, lease
// lost, trust window ended, worker shutting down) are recorded as system log
// lines. On shutdown (Run's context cancelled) the worker takes no new claims,
// stops its jobs and relinquishes their attempts, so each run gets a fresh
// attempt that does not count as a retry.
//
// # Results
//
// After the process has exited and its output is flushed, the result is posted
// with one request_id fixed for the attempt and retried until accepted, or
// until the lease is reported gone or the trust window ends.
//
// # Sources and artifacts
//
// A job with a source gets that commit unpacked as its working directory
// before it starts (source.go): a fresh single-use ticket per try, the
// archive unpacked through an os.Root, and its commit compared with the
// claim's. When the process has exited, the declared artifacts found in
// JOBPLANE_ARTIFACTS_DIR are hashed, announced and uploaded (artifacts.go);
// their IDs go into the result.
//
// Not done yet: key rotation.
package worker
