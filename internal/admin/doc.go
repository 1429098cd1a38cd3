// Package admin is the tenant administration an admin principal does over
// the API and the web UI: principals, API tokens, runner registration tokens
// and the runner list; and the runner identities: a registration, a key
// rotation. Every change appends its audit event in the same
// transaction. Disabling a runner ends its attempts, which is the run
// service's (control.Service.SetRunnerStatus).
package admin
