// Package claimline is the waiting room of long-polling claims.
//
// Long-polling claims wait in line, one line per claim scope (tenant, pool
// and labels: runners that could take the same attempts). Only the head of a
// line watches for new work — the store's wake signal and, because retries
// become due with time rather than with a notification, a one-second look.
// A waiter that claims something pokes the next two waiters of its line, so
// that a burst of W new runs is handed out in about log2(W) rounds, and a
// waiter that finds nothing stops the chain. Waking is thus proportional to
// the work, not to the number of runners waiting: 10,000 idle runners cost
// one look a second per scope instead of 10,000, and one new run wakes a
// few of them instead of all. Lines are per scope, so a busy tenant or pool
// never holds up another's runners, and in arrival order, so runners of
// one scope get work first come, first served.
//
// The run service (control.Service.Claim) decides what a waiter does when
// it looks; this package only says who looks when.
package claimline
