package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	tenant  = "tnt_01J0000000000000000000000A"
	run     = "run_01J0000000000000000000000A"
	attempt = "att_01J0000000000000000000000A"
)

// TestHostileNames is RELIABILITY A4 (table part): every hostile name is
// refused before it can become a path.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"../x", `..\x`, "%2e%2e%2f", "%252e", "/etc/passwd", `C:\x`, `\\?\x`, "a\x00b", "a\nb", "a\tb",
		"x.\u202e", " x", "x ", "．．／", strings.Repeat("a", 4096), "", ".", "..", ".hidden",
		"a/b", "a\\b", "-x", "_x", "ä", "x:y", "x y",
	} {
		_, err := Key(tenant, run, attempt, name)
		require.ErrorIs(t, err, ErrInvalidName, "Key(%q)", name)
		require.ErrorIs(t, ValidName(name), ErrInvalidName, "ValidName(%q)", name)
	}
	for _, name := range []string{"report.json", "a", "A-1_b.tar.gz", strings.Repeat("a", 128)} {
		k, err := Key(tenant, run, attempt, name)
		require.NoError(t, err, "Key(%q)", name)
		require.Equal(t, tenant+"/"+run+"/"+attempt+"/"+name, k)
	}
	_, err := Key("..", run, attempt, "x")
	require.ErrorIs(t, err, ErrInvalidName, "segments are checked too")
	_, err = Key(tenant, run, ".tmp", "x")
	require.ErrorIs(t, err, ErrInvalidName)
}

// FuzzArtifactName is RELIABILITY A4: whatever the name, either it is
// refused or its key is a local path directly inside the attempt's prefix,
// and the filesystem store keeps it there.
func FuzzArtifactName(f *testing.F) {
	for _, s := range []string{"report.json", "../x", `..\x`, "%2e%2e%2f", "/etc/passwd", "．．／", "a\x00", ".", "..", "a.", "C:\\x"} {
		f.Add(s)
	}
	dir := f.TempDir()
	st, err := OpenFS(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	prefix := filepath.Join(dir, tenant, run, attempt)
	f.Fuzz(func(t *testing.T, name string) {
		k, err := Key(tenant, run, attempt, name)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("Key(%q) = %v, want ErrInvalidName", name, err)
			}
			return
		}
		if !filepath.IsLocal(k) {
			t.Fatalf("Key(%q) = %q, not local", name, k)
		}
		full := filepath.Join(dir, filepath.FromSlash(k))
		if filepath.Dir(full) != prefix {
			t.Fatalf("Key(%q) = %q resolves to %q, outside %q", name, k, full, prefix)
		}
		s, err := st.Stage(context.Background(), strings.NewReader("x"), 10)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(context.Background(), k); err != nil && !errors.Is(err, ErrExists) {
			t.Fatalf("Publish(%q): %v", k, err)
		}
		_ = s.Discard()
		if _, err := os.Lstat(full); err != nil {
			t.Fatalf("published %q is not at %q: %v", k, full, err)
		}
	})
}

func TestStagePublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := OpenFS(dir)
	require.NoError(t, err)
	defer st.Close()
	data := []byte("hello artifact")
	sum := sha256.Sum256(data)

	s, err := st.Stage(ctx, bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err, "exactly max bytes is allowed")
	require.Equal(t, int64(len(data)), s.Size())
	require.Equal(t, hex.EncodeToString(sum[:]), s.SHA256())
	k, _ := Key(tenant, run, attempt, "a.txt")
	_, err = st.Open(ctx, k)
	require.ErrorIs(t, err, ErrNotFound, "invisible before Publish")
	require.NoError(t, s.Publish(ctx, k))
	rc, err := st.Open(ctx, k)
	require.NoError(t, err)
	got, _ := io.ReadAll(rc)
	rc.Close()
	require.Equal(t, data, got)
	requireNoTemporaries(t, dir)

	// Never overwritten.
	s2, err := st.Stage(ctx, strings.NewReader("other"), 100)
	require.NoError(t, err)
	require.ErrorIs(t, s2.Publish(ctx, k), ErrExists)
	require.NoError(t, s2.Discard())
	requireNoTemporaries(t, dir)

	// Too large: refused after max+1 bytes, nothing kept.
	src := &countingReader{r: strings.NewReader(strings.Repeat("x", 1<<20))}
	_, err = st.Stage(ctx, src, 1000)
	require.ErrorIs(t, err, ErrTooLarge)
	require.Equal(t, int64(1001), src.n, "reads stop at max+1")
	requireNoTemporaries(t, dir)

	require.NoError(t, st.Delete(ctx, k))
	require.NoError(t, st.Delete(ctx, k), "deleting a missing object is fine")
	_, err = st.Open(ctx, "../etc/passwd")
	require.ErrorIs(t, err, ErrInvalidName)
}

func TestOpenRemovesStaleTemporaries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := OpenFS(dir)
	require.NoError(t, err)
	_, err = st.Stage(context.Background(), strings.NewReader("crash"), 100)
	require.NoError(t, err) // staged, never published nor discarded: a crash
	st.Close()
	entries, _ := os.ReadDir(filepath.Join(dir, tmpDir))
	require.Len(t, entries, 1)
	st, err = OpenFS(dir)
	require.NoError(t, err)
	defer st.Close()
	requireNoTemporaries(t, dir)
}

// TestConcurrentSameName is RELIABILITY A5 at the storage level: two
// attempts uploading one logical name land under their own prefixes, and
// two publishes of one key never overwrite each other.
func TestConcurrentSameName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := OpenFS(dir)
	require.NoError(t, err)
	defer st.Close()
	k1, _ := Key(tenant, run, "att_1", "report.json")
	k2, _ := Key(tenant, run, "att_2", "report.json")
	var wg sync.WaitGroup
	results := make([]error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := k1
			if i%2 == 1 {
				k = k2
			}
			s, err := st.Stage(ctx, strings.NewReader(k), 1000)
			if err != nil {
				results[i] = err
				return
			}
			results[i] = s.Publish(ctx, k)
			_ = s.Discard()
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		if err == nil {
			wins++
		} else {
			require.ErrorIs(t, err, ErrExists)
		}
	}
	require.Equal(t, 2, wins, "exactly one publish per key")
	for _, k := range []string{k1, k2} {
		rc, err := st.Open(ctx, k)
		require.NoError(t, err)
		b, _ := io.ReadAll(rc)
		rc.Close()
		require.Equal(t, k, string(b), "each attempt's object holds its own bytes")
	}
	requireNoTemporaries(t, dir)
}

func requireNoTemporaries(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, tmpDir))
	require.NoError(t, err)
	require.Empty(t, entries, "no staged upload left behind")
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
