// Package executor is the seam between the worker and whatever runs a job:
// a child process, a container, a Kubernetes Job, a GitHub Actions job.
//
// The worker claims an attempt, renews its lease, ships its log lines,
// uploads its artifacts and reports its result; an Executor only starts the
// job, tells the worker what it wrote and how it ended, and stops it when
// asked. Everything an executor needs arrives in a Spec; everything it says
// comes back through the Spec's Output and the Job's Exit. An executor never
// talks to the jobplane server and never sees the runner's key.
//
// # The lease bound
//
// A job must never outlive its lease, whatever happens to the worker
// (killed, stopped, cut off from the server). Spec.Until and Job.Extend
// carry the end of the worker's trust window (the last renewal's send time
// plus the lease TTL minus the worker's margin) to the executor, which
// must have the job's processes gone by then even when the worker is no
// longer there to ask: the process and container executors hand every
// new end to a supervisor that is the job's parent (or the container's
// entrypoint) and kills the job's whole process tree at that instant, or
// at once when the worker that feeds it goes away.
//
// # Orphans
//
// A worker that restarts holds no lease of what it ran before, so Sweep
// ends and removes whatever an executor left of attempts the worker does
// not hold (containers, pods), named by the runner's ID.
//
// # Reasons
//
// How a job ended is an Exit: an exit code, a summary for the log and the
// result, and a Reason when the executor knows more than a code can say
// (out of memory, image missing, unschedulable). A job that could not be
// started at all is a *StartError with a Reason; the worker reports it as
// the attempt's failure rather than retrying it.
package executor
