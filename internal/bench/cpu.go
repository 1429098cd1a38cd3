package bench

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// userHZ is the unit of the CPU times in /proc/PID/stat. Linux reports
// them in USER_HZ, which is 100 on every architecture Go supports.
const userHZ = 100

// procCPU sums the CPU time (user + system, with that of reaped children)
// of the processes under root (a /proc) whose command is comm. A
// PostgreSQL server is a postmaster and a process per connection; a
// backend that exits hands its time to the postmaster's children's time,
// so the sum does not drop when the pool closes a connection. ok is
// false when no such process could be read.
func procCPU(root, comm string) (d time.Duration, ok bool) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0, false
	}
	var ticks int64
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue // gone, or not ours to read
		}
		// "pid (comm) state ppid …": comm may hold spaces and
		// parentheses, so the fields start after the last ')'.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != comm {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 15 {
			continue
		}
		// utime, stime, cutime, cstime: fields 14–17 of stat(5), 12–15
		// here (the fields after comm start at state, field 3).
		for _, v := range f[11:15] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			ticks += n
		}
		ok = true
	}
	return time.Duration(ticks) * time.Second / userHZ, ok
}

// dbMeter reads the CPU time of a PostgreSQL server on this machine, so
// that a phase can report the database's CPU per run next to the
// process's own. It measures nothing (ok false) for SQLite, for a server
// on another host, or where /proc cannot be read.
type dbMeter struct{ on bool }

func newDBMeter(db string) dbMeter {
	if !strings.HasPrefix(db, "postgres://") && !strings.HasPrefix(db, "postgresql://") {
		return dbMeter{}
	}
	cfg, err := pgconn.ParseConfig(db)
	if err != nil {
		return dbMeter{}
	}
	switch h := cfg.Host; {
	case strings.HasPrefix(h, "/"), h == "localhost":
	default:
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return dbMeter{}
		}
	}
	_, ok := procCPU("/proc", "postgres")
	return dbMeter{on: ok}
}

// now is the server's CPU so far (0 when not measured).
func (m dbMeter) now() time.Duration {
	if !m.on {
		return 0
	}
	d, _ := procCPU("/proc", "postgres")
	return d
}

// perRun is the server's CPU in microseconds per run since start (0 when
// not measured).
func (m dbMeter) perRun(start time.Duration, runs int) float64 {
	if !m.on || runs == 0 {
		return 0
	}
	return float64((m.now()-start)/time.Microsecond) / float64(runs)
}

// cpuTotal is a phase's CPU per operation, this process's and the
// database server's together. On a machine whose cores are all busy, the
// rates of two phases are in the inverse ratio of their totals; where they
// are not (a loop that mostly waits for commits), the ratio of the totals
// says what the rates would be if they were. So the report prints
// "lifecycle/raw by CPU": the raw loop's total over the lifecycle's.
func cpuTotal(p Phase) float64 { return p.CPUPerOpUs + p.DBCPUPerOpUs }

// cpuText is a phase's CPU per operation (unit) as the report prints it.
func cpuText(p Phase, unit string) string {
	s := fmt.Sprintf("%.0f µs CPU/%s", p.CPUPerOpUs, unit)
	if p.DBCPUPerOpUs > 0 {
		s += fmt.Sprintf(" + %.0f µs in PostgreSQL", p.DBCPUPerOpUs)
	}
	return s
}
