package control

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

type sweptCounter struct {
	nopObserver
	mu sync.Mutex
	n  map[string]int
}

func (c *sweptCounter) Swept(kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[kind] += n
}

// TestSweepStagedUploads: an upload a crash left staged is kept while an
// upload of that age could still be in flight (the upload timeout and a
// margin), then dropped, and counted.
func TestSweepStagedUploads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fs, err := artifact.OpenFS(dir)
	require.NoError(t, err)
	t.Cleanup(func() { fs.Close() })
	// Staged files carry the filesystem's time: start the fake clock there.
	fc := clock.NewFake(time.Now())
	obs := &sweptCounter{n: map[string]int{}}
	svc, err := New(Config{Store: testdb.SQLite(t), Clock: fc, Definitions: &fakeDefs{}, Metrics: obs,
		Artifacts: ArtifactConfig{Storage: fs, UploadTimeout: time.Minute}})
	require.NoError(t, err)
	key, _ := artifact.Key("tnt_1", "run_1", "att_1", "crash.bin")
	_, err = fs.Stage(context.Background(), key, strings.NewReader("left by a crash"), 100)
	require.NoError(t, err)

	fc.Advance(5 * time.Minute) // less than timeout + margin
	n, err := svc.SweepStagedUploads(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "possibly still in flight")
	fc.Advance(2 * time.Minute)
	n, err = svc.SweepStagedUploads(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, obs.n["staged_upload"])
	entries, err := os.ReadDir(filepath.Join(dir, ".tmp"))
	require.NoError(t, err)
	require.Empty(t, entries)
}
