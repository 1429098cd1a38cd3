package bench

import (
	"math"
	"slices"
	"time"
)

// Latency summarizes a set of durations, in milliseconds for JSON.
type Latency struct {
	Count int     `json:"count"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// Summarize computes the percentiles of samples (nearest rank); it sorts
// samples in place.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	return Latency{
		Count: len(samples),
		P50ms: ms(percentile(samples, 50)),
		P99ms: ms(percentile(samples, 99)),
		MaxMs: ms(samples[len(samples)-1]),
	}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000
}

// Phase is the outcome of one timed phase.
type Phase struct {
	// Ops is the number of completed operations (runs requested, or runs
	// claimed and finished).
	Ops int `json:"ops"`
	// Seconds is the phase's wall time, from the first call's start to the
	// last counted operation's end.
	Seconds float64 `json:"seconds"`
	// PerSecond is Ops / Seconds.
	PerSecond float64 `json:"per_second"`
	// CPUPerOpUs is this process's CPU time (server, callers and, on
	// SQLite, the database) per operation, in microseconds.
	CPUPerOpUs float64 `json:"cpu_per_op_us"`
	// DBCPUPerOpUs is the CPU time of the PostgreSQL server's processes
	// per operation, in microseconds, when the server runs on this
	// machine (read from /proc; 0 otherwise). The whole server is
	// counted, so anything else it serves at the time is too.
	DBCPUPerOpUs float64 `json:"db_cpu_per_op_us,omitempty"`
}

func newPhase(ops int, d time.Duration) Phase {
	p := Phase{Ops: ops, Seconds: math.Round(d.Seconds()*1000) / 1000}
	if d > 0 {
		p.PerSecond = math.Round(float64(ops)/d.Seconds()*10) / 10
	}
	return p
}
