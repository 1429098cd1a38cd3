package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProcCPU: the CPU time of the processes named comm is summed from
// their stat files (utime, stime and the reaped children's), past a
// command name with spaces and parentheses; other processes, other
// entries and unreadable files are skipped.
func TestProcCPU(t *testing.T) {
	root := t.TempDir()
	stat := func(pid, line string) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, pid, "stat"), []byte(line), 0o644))
	}
	//                    state ppid pgrp sess tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
	stat("10", "10 (postgres) S 1 10 10 0 -1 4194560 100 200 0 0 150 50 300 100 20 0 1 0 5 0 0")
	stat("11", "11 (postgres) S 10 10 10 0 -1 4194560 100 200 0 0 7 3 0 0 20 0 1 0 5 0 0")
	stat("12", "12 (jobplane (x)) R 1 12 12 0 -1 0 0 0 0 0 999 999 0 0 20 0 1 0 5 0 0")
	stat("13", "13 (postgres) S 1 13")                                      // too short: skipped
	stat("self", "10 (postgres) S 1 10 10 0 -1 0 0 0 0 0 1 1 1 1 20 0 1 0") // not a PID
	require.NoError(t, os.MkdirAll(filepath.Join(root, "14"), 0o755))       // no stat file

	got, ok := procCPU(root, "postgres")
	require.True(t, ok)
	require.Equal(t, time.Duration(150+50+300+100+7+3)*10*time.Millisecond, got)

	got, ok = procCPU(root, "jobplane (x)")
	require.True(t, ok)
	require.Equal(t, 1998*10*time.Millisecond, got)

	_, ok = procCPU(root, "redis-server")
	require.False(t, ok)
	_, ok = procCPU(filepath.Join(root, "missing"), "postgres")
	require.False(t, ok)
}

// TestDBMeterOnlyForLocalPostgres: the database's CPU is measured only
// for a PostgreSQL server on this machine.
func TestDBMeterOnlyForLocalPostgres(t *testing.T) {
	for _, db := range []string{"", "sqlite:/tmp/x.db", "postgres://u@db.example:5432/x", "postgres://u@10.0.0.5/x", "not a url"} {
		require.False(t, newDBMeter(db).on, db)
		require.Zero(t, newDBMeter(db).perRun(0, 10), db)
	}
}
