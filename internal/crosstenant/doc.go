// Package crosstenant notes what a runner's signed request named of
// another tenant — an attempt, a run or an artifact that exists, but not in
// the runner's tenant — and audits it in the runner's tenant once the
// request is over. The refusal the runner gets is the one for an unknown
// identifier; only the kind of what it named is kept, so the other
// tenant's identifiers and data stay out of this tenant's audit log.
//
// A Watcher starts a watch for one request; the code that refuses the
// request notes what it saw (Note, Probe, RefusedAttempt) through the
// request's context, and the watch's flush writes the event.
package crosstenant
