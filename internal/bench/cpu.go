package bench

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) this process has used. On a
// shared machine wall-clock rates swing with the neighbours' load; the CPU
// spent per run does much less, and on SQLite it covers the server, the
// database and the callers, all of which run in this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerRun is the process CPU in microseconds per run since start.
func cpuPerRun(start time.Duration, runs int) float64 {
	if runs == 0 {
		return 0
	}
	return float64((processCPU()-start)/time.Microsecond) / float64(runs)
}
