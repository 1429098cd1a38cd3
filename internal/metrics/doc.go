// Package metrics exposes the control plane's Prometheus metrics on its own
// registry (never the global default, so tests and several servers in one
// process do not collide).
//
// Two kinds: counters and histograms the service feeds as it works (claim
// latency, policy decisions, HTTP requests), each one atomic add on the hot
// path; and gauges read from the database at scrape time (runs by job and
// state, attempts by state, queue depth, lease waiters, runner heartbeat
// age, audit sealing), because only the database knows them for every
// replica at once. docs/operations.md lists every metric.
package metrics
