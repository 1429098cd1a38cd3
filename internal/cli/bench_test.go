package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
