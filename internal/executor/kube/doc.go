// Package kube is the Kubernetes executor: each attempt runs as a
// Kubernetes Job (one pod, restartPolicy Never, backoffLimit 0) in the
// worker's namespace, through client-go.
//
// A Job rather than a bare Pod: the Job controller enforces
// activeDeadlineSeconds from the control plane, so the bound on the pod's
// life holds when the worker is gone; the Job owns the pod, the
// attempt's Secret and NetworkPolicy, so deleting the Job with foreground
// propagation removes them all, and the garbage collector removes what a crashed worker left.
//
// # What is created
//
// For an attempt, the executor creates, in order:
//
//   - the Job, suspended (no pod yet), named jobplane-HASH (HASH of the
//     runner and attempt IDs), labelled and annotated with the runner,
//     tenant, run, job and attempt;
//   - a Secret holding the whole environment of the job (the run token and
//     credentials among it), and with the supervisor its parameters file,
//     owned by the Job; the container reads every variable through
//     secretKeyRef, so no value appears in the Job, the pod or an event;
//   - for an attempt of run.network: none, a NetworkPolicy jobplane-HASH-deny
//     owned by the Job, selecting the attempt's pod alone (by its labels)
//     with policyTypes Ingress and Egress and no rule: no traffic in or
//     out, where the cluster's network plugin enforces NetworkPolicy. A
//     policy that cannot be created fails the start;
//   - then it resumes the Job, so the pod starts only once its Secret (and
//     NetworkPolicy) exists.
//
// The NetworkPolicy is deleted only once the Job, hence its pod, is gone:
// a pod in its grace period keeps it.
//
// The pod mounts no service-account token (automountServiceAccountToken:
// false) and has no service links. The runner's key stays in the worker's
// pod: the job only ever sees the environment the worker built for it.
//
// # The lease bound
//
// The Job's activeDeadlineSeconds is the time from the resume to 3 s before
// the end of the worker's trust window (Spec.Until), rounded down, and
// every Extend moves it (the field is mutable and the Job controller
// re-evaluates it on each change). If the worker dies, no Extend comes and
// the Job controller deletes the pod at that deadline, with a 2 s grace
// period: the pod is gone by Until as long as the controller acts within
// the remaining second (an idle control plane takes milliseconds; a
// slower one adds its delay to the bound). The deadline runs on the
// controller manager's clock from the Job's start, so clock skew between
// the worker and the cluster does not move it.
//
// With Config.SupervisorImage, the job also runs under jobplane's
// supervisor, copied into the pod by an init container: it polls
// GET /v1/run/lease with the job's run token and kills the job at the
// lease's expiry less the worker's margin unless a later expiry is
// confirmed, so the bound holds without the control plane too (see
// package supervise). The Job's deadline then only backs the supervisor
// up, 5 s after Spec.Until: before it, it would race each renewal of a
// short lease.
// A job of run.network: none is the exception: its pod cannot reach the
// server, so its supervisor only writes the parameters file, the Job's
// deadline bounds it as without a supervisor, and a source or artifacts
// are refused at start.
//
// # Source and artifacts
//
// The supervisor also does in the pod what the worker does on its host
// for the other executors (Capabilities.OwnFiles), with the run token: it
// fetches Spec.Source into the workspace (POST /v1/run/source), writes the
// parameters file the worker wrote (carried in the Secret), and after a
// job that ended of itself uploads Spec.Artifacts (POST /v1/run/artifacts),
// writing the stored IDs to the container's termination message, which
// Exit.Artifacts reports. Without a supervisor, a job with a source or
// artifacts is refused at start.
//
// # Waiting for a pod
//
// A pod the scheduler cannot place ends the attempt with the reason
// "unschedulable" after Config.ScheduleWait (default 2 minutes); a pod
// whose image cannot be pulled ends it with "image_missing" after
// Config.PullWait (default 1 minute). Either way the Job is deleted.
//
// # Logs
//
// The job's output is read from pods/log with follow, in order. The API
// merges stdout and stderr into one stream, so every line is reported as
// stdout. Wait returns after the stream has ended: once the Job is gone, a
// stream still open is closed.
package kube
