// Package actions is the GitHub Actions compatibility mode (docs/github.md):
// a job with executor github-actions runs as a workflow in the run's
// repository instead of on a jobplane runner.
//
// Its attempts sit in store.ActionsPool, where no runner claims them. The
// dispatcher (Service.Dispatch) asks GitHub to run the job's workflow for
// each of them, through a Dispatcher over the App's client, and ends those
// GitHub refuses or whose workflow never calls back. The workflow's job
// then trades its Actions OIDC token for exactly the attempt it was
// dispatched for (Service.Exchange): a one-attempt runner with the
// workflow's key, to which the run service leases the attempt as a claim
// would. From then on the workflow renews, logs, uploads and reports
// through the signed runner protocol like any runner.
//
// It plugs into the run service (package control) from both sides: it asks
// the run service to hand out, end and re-announce attempts through Runs
// (a *control.Service), and the run service asks it what such an attempt
// waits for through control.Actions.
package actions
