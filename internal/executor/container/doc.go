// Package container is the executor that runs each attempt in a container
// of its own, through a container engine's Docker Engine API: Docker, or
// Podman's Docker-compatible service (`podman system service`).
//
// # An attempt's container
//
// One container per attempt, named from a hash of the runner and attempt
// IDs and labelled with the runner, tenant, run, job and attempt. Its
// entrypoint is the supervisor (`jobplane supervise`): the worker's own
// statically linked binary, mounted read-only at /jobplane/bin/jobplane. The
// attempt's directories are bind-mounted under /jobplane (workspace,
// artifacts, home, tmp, and params.json read-only); nothing else of the
// host is. run.resources become the engine's memory (without swap) and CPU
// limits and run.network: none its "none" network mode.
//
// The worker attaches to the container's stdin, stdout and stderr before
// starting it. Over stdin it sends the supervisor's setup (the job's whole
// environment, the run token and credentials among it, and the first lease
// bound; see package supervise) and then each new bound and stop: nothing
// secret is in the container's configuration, which the engine shows to
// anyone who may inspect it, and the engine keeps no log (log driver
// "none"): the worker reads stdout and stderr apart from the attachment and
// masks them as for any job.
//
// # How it ends
//
// The exit code is the supervisor's, which is the job's. A memory-limited
// job killed by SIGKILL that the worker did not ask for, or that the engine
// records as out of memory, ends with executor.ReasonOOMKilled. A missing
// image that the pull policy does not let the engine pull, or whose pull
// fails, is a start error with executor.ReasonImageMissing, at once. Stop
// sends the supervisor a stop (SIGTERM, grace, SIGKILL to the job's whole
// tree) and asks the engine to stop the container a little after the
// grace, in case the supervisor cannot; Wait removes the container in every
// case, and Sweep removes a restarted worker's leftovers.
//
// # The lease bound
//
// The supervisor is the container's first process and kills the job's
// whole tree at the bound the worker last sent, or at once when the
// attachment's stdin closes (the worker died and the engine closed it). When
// the supervisor ends, the container ends, and with it every process left
// in its PID namespace.
package container
