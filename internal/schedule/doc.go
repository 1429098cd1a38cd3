// Package schedule fires the schedules jobs declare (docs/schedules.md): a
// job's schedule block requests a run on its channel at every fire time of
// its cron expression, as the built-in service principal "scheduler".
//
// The store keeps, per tenant, channel and job, the next fire time; every
// replica runs a pass (Service.Fire) every Interval and claims a due fire
// time with a conditional update, so that exactly one replica requests the
// window's run. The run's idempotency key names the window as well, so the
// runs table backs "at most one run per job and window" too.
//
// Runs are requested through the run service's own entry point
// (control.Service.RequestRunFrom, as Runs), so a scheduled run meets the
// same policies, parameter checks and leases as an API request. The
// schedules are those of the server's definitions (control.Definitions) in
// the default tenant, and those of installation tenants' own definitions
// (Tenants, the GitHub App) in their tenants.
package schedule
