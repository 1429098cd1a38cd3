package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/bench"
)

// TestBenchMemProfile runs a small benchmark on SQLite with an allocation
// profile of one phase: the profile as the phase starts and as it ends,
// both in pprof's (gzip) format, and a profile of a phase that is not
// run is reported.
func TestBenchMemProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "mem.prof")
	code, out, errOut := run(t, "bench", "--db", "sqlite:"+filepath.Join(dir, "b.db"), "--runs", "20", "--workers", "2",
		"--clients", "1", "--dispatch", "2", "--memprofile", prof, "--profile-phase", "lifecycle")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "verified: all")
	for _, p := range []string{prof + ".base", prof} {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(b, []byte{0x1f, 0x8b}), "%s is not a gzipped profile", p)
	}

	code, _, errOut = run(t, "bench", "--profile-phase", "lifecycle")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--profile-phase needs --cpuprofile or --memprofile")
}

func TestMemProfileOfAPhaseNotRun(t *testing.T) {
	m := &memProfile{path: filepath.Join(t.TempDir(), "m.prof"), phase: "lifecycle"}
	m.hook("request", true)
	m.hook("request", false)
	require.ErrorContains(t, m.finish(), `phase "lifecycle" did not run`)
}

// TestBenchRounds: --rounds prints each round, then the summary; --json
// prints one object with both; flags that take one run are refused.
func TestBenchRounds(t *testing.T) {
	args := []string{"bench", "--rounds", "2", "--runs", "8", "--workers", "2", "--clients", "1", "--dispatch", "2"}
	code, out, errOut := run(t, args...)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	for _, want := range []string{"round 1 of 2\n", "round 2 of 2\n", "summary of 2 rounds: median (range)", "  lifecycle      "} {
		require.Contains(t, out, want)
	}
	require.Equal(t, 2, strings.Count(out, "verified: all"))

	code, out, errOut = run(t, append(args, "--json")...)
	require.Equal(t, 0, code, "stderr:\n%s", errOut)
	var rs struct {
		Rounds  []json.RawMessage `json:"rounds"`
		Summary struct {
			Rounds    int `json:"rounds"`
			Lifecycle struct {
				Median float64 `json:"median"`
			} `json:"lifecycle_per_second"`
		} `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rs), out)
	require.Len(t, rs.Rounds, 2)
	require.Equal(t, 2, rs.Summary.Rounds)
	require.Positive(t, rs.Summary.Lifecycle.Median)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rounds", "0"}, "--rounds must be at least 1"},
		{[]string{"--rounds", "2", "--cpuprofile", filepath.Join(t.TempDir(), "c.prof")}, "profile one round at a time"},
		{[]string{"--rounds", "2", "--idle", "5"}, "--idle and --backlog are measured once"},
		{[]string{"--rounds", "2", "--db", "sqlite:" + filepath.Join(t.TempDir(), "b.db")}, "leave --db out"},
	} {
		code, _, errOut := run(t, append([]string{"bench"}, c.args...)...)
		require.NotEqual(t, 0, code, "%v", c.args)
		require.Contains(t, errOut, c.want, "%v", c.args)
	}
}

// TestBenchRoundsProgress: on a terminal each round's progress names the
// round it is in.
func TestBenchRoundsProgress(t *testing.T) {
	c := &BenchCmd{Rounds: 2}
	var mu sync.Mutex
	seen := map[string]bool{}
	cfg := bench.Config{Runs: 8, Workers: 2, Clients: 1, Dispatch: 2, Progress: func(phase string, done, total int) {
		mu.Lock()
		seen[strings.Fields(phase)[0]] = true
		mu.Unlock()
	}}
	var out, errOut bytes.Buffer
	require.NoError(t, c.runRounds(&Globals{Ctx: context.Background(), Stdout: &out, Stderr: &errOut}, cfg, false))
	require.Equal(t, map[string]bool{"1/2": true, "2/2": true}, seen)
	require.Contains(t, out.String(), "summary of 2 rounds")
}
