// Package supervise is the small parent that every job of the process and
// container executors runs under, so that no job outlives its lease
// whatever happens to the worker that started it.
//
// The supervisor is the jobplane binary itself, started as
// `jobplane supervise [flags] -- COMMAND [ARG...]` (the executors re-execute
// their own binary with argv[0] set to "jobplane-supervise", which this
// package's init recognises, so test binaries supervise too). It makes
// itself a child subreaper (PR_SET_CHILD_SUBREAPER), starts COMMAND as the
// leader of a new process group with stdin /dev/null and the supervisor's
// stdout and stderr, and from then on every process the job starts stays
// its descendant, even one that double-forks and calls setsid. To end the
// job it signals the job's process group and every descendant it finds in
// /proc, and repeats with SIGKILL until it has no child left.
//
// # Flags
//
//	-control-fd N   read control lines from file descriptor N (-1: none)
//	-status-fd N    write status lines to file descriptor N (-1: none)
//	-until-ms MS    the job must be gone MS milliseconds from now (-1: no bound)
//	-dir DIR        the job's working directory
//	-user UID:GID   run the job as UID:GID with no supplementary groups
//	                (the supervisor keeps its own user, so the job can neither
//	                signal nor trace it)
//	-env-file PATH  the job's environment as NUL-separated KEY=VALUE entries;
//	                the supervisor reads the file, removes it and passes the
//	                entries to the job only (without it the job inherits the
//	                supervisor's environment)
//	-lease-poll     learn the lease from the server (see "Polling the lease")
//	-lease-poll-ms MS  milliseconds between polls (0: a quarter of the
//	                lease's TTL, between 500 ms and 10 s)
//	-install PATH   copy this binary to PATH and exit (no command)
//	-setup          before starting the job, read its environment and first
//	                bound from the control stream (below); needs -control-fd
//
// Both descriptors are close-on-exec in the supervisor: the job never holds
// them.
//
// # Control lines (worker → supervisor)
//
// One ASCII line per message:
//
//	until MS   the job must be gone MS milliseconds after the line is read,
//	           measured on the supervisor's monotonic clock; a bound earlier
//	           than the current one is ignored
//	stop MS    SIGTERM to the job now and SIGKILL after MS milliseconds
//	           (0: SIGKILL at once); a later stop may shorten the grace, never
//	           lengthen it
//
// With -setup the stream begins with the job's setup, and the job starts
// only once it is read:
//
//	env ["NAME=VALUE",...]   optional: the job's whole environment, a JSON
//	                         array of strings on one line (at most 1 MiB)
//	until MS                 the first bound; the job starts on reading it
//
// A container engine keeps what its containers are created with (their
// environment, their arguments) where others may read it; the setup keeps
// the run token and credentials out of it, and measures the first bound from
// when the worker sends it, not from when the container was created. A
// stream that ends or is malformed before `until` starts nothing.
//
// End of file or a read error on the control descriptor means the worker is
// gone: the supervisor kills the job at once. So does SIGHUP when the
// supervisor's parent process changed (the executors start it with
// PR_SET_PDEATHSIG=SIGHUP). When the bound passes without a later `until`
// (the worker is stopped, or cut off from every server and so renews
// nothing) the supervisor kills the job at once. SIGTERM and SIGINT to the
// supervisor are passed on to the job as SIGTERM (a container engine's or
// kubelet's stop; its own SIGKILL follows after its grace).
//
// # Status lines (supervisor → worker)
//
// One JSON object per line:
//
//	{"event":"started","pid":123}
//	{"event":"start_failed","error":"exec: no such file"}
//	{"event":"exit","code":3,"summary":"exit status 3","reason":"lease_bound"}
//
// "started" or "start_failed" comes first; "exit" comes last, once every
// process of the job is gone. Reason is empty, "lease_bound" (killed when
// the bound passed), "worker_gone" (killed when the control stream ended),
// "stopped" (ended after a stop line or a SIGTERM) or "lease_ended" (the
// server said the attempt no longer holds its lease, -lease-poll). The
// supervisor exits with the job's code: its exit status, or 128+N when signal N killed it;
// 127 when it could not be started, 126 for a usage error.
//
// # The bound
//
// The worker sends as the bound the end of its trust window: the send time
// of its last successful renewal plus the lease TTL minus max(1 s, TTL/10).
// Whatever happens to the worker, the job's processes are therefore gone by
// the lease's expiry minus at least one second, plus the time SIGKILL takes
// (milliseconds), as long as the supervisor's clock runs at the server's
// rate.
//
// # Polling the lease
//
// A supervisor far from its worker (the Kubernetes executor's pod) has no
// control stream. With -lease-poll it reads JOBPLANE_API, JOBPLANE_RUN_TOKEN
// and JOBPLANE_ATTEMPT_ID from the job's environment and asks
// GET /v1/run/lease with the run token: before the job starts (a refusal,
// or an ended attempt, and the job never starts; a server out of reach
// leaves the job under -until-ms, or fails the start without it), and then
// at each poll interval. Its bound is the answer's remaining_ms, counted
// from when the question was sent, less max(1 s, TTL/10); a later answer
// moves it later, never earlier, and an answer 410 attempt_ended kills the
// job at once. When the bound passes the supervisor kills the job and says
// so on stderr.
package supervise
