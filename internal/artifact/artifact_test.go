package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/s3test"
)

func TestMain(m *testing.M) {
	code := s3test.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

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
		s, err := st.Stage(context.Background(), k, strings.NewReader("x"), 10)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(context.Background()); err != nil && !errors.Is(err, ErrExists) {
			t.Fatalf("Publish(%q): %v", k, err)
		}
		_ = s.Discard()
		if _, err := os.Lstat(full); err != nil {
			t.Fatalf("published %q is not at %q: %v", k, full, err)
		}
	})
}

// store is one Storage under test, with a way to count the staged uploads
// it holds.
type store struct {
	name   string
	st     Storage
	staged func(t *testing.T) int
}

// stores opens a filesystem store and an S3 store (a bucket of its own on
// the shared SeaweedFS), so that each test holds both to one contract.
func stores(t *testing.T) []store {
	t.Helper()
	dir := t.TempDir()
	fs, err := OpenFS(dir)
	require.NoError(t, err)
	t.Cleanup(func() { fs.Close() })
	out := []store{{name: "fs", st: fs, staged: func(t *testing.T) int {
		entries, err := os.ReadDir(filepath.Join(dir, tmpDir))
		require.NoError(t, err)
		return len(entries)
	}}}
	srv := s3test.Optional(t)
	if srv == nil {
		return out
	}
	bucket := srv.Bucket(t)
	s3st := openS3On(t, srv, bucket, S3Config{})
	return append(out, store{name: "s3", st: s3st, staged: func(t *testing.T) int {
		up, err := srv.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
		require.NoError(t, err)
		return len(up.Uploads)
	}})
}

// openS3 opens an S3 store on a fresh bucket of the shared server.
func openS3(t *testing.T, cfg S3Config) (*S3, *s3test.Server, string) {
	t.Helper()
	srv := s3test.Shared(t)
	bucket := srv.Bucket(t)
	return openS3On(t, srv, bucket, cfg), srv, bucket
}

func openS3On(t *testing.T, srv *s3test.Server, bucket string, cfg S3Config) *S3 {
	t.Helper()
	cfg.Bucket, cfg.Endpoint, cfg.Region = bucket, srv.Endpoint, s3test.Region
	cfg.Credentials = StaticCredentials(srv.AccessKey, srv.SecretKey, "")
	st, err := OpenS3(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func TestStagePublish(t *testing.T) {
	t.Parallel()
	for _, sc := range stores(t) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := sc.st
			data := []byte("hello artifact")
			sum := sha256.Sum256(data)
			k, _ := Key(tenant, run, attempt, "a.txt")

			s, err := st.Stage(ctx, k, bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err, "exactly max bytes is allowed")
			require.Equal(t, int64(len(data)), s.Size())
			require.Equal(t, hex.EncodeToString(sum[:]), s.SHA256())
			_, err = st.Open(ctx, k)
			require.ErrorIs(t, err, ErrNotFound, "invisible before Publish")
			require.NoError(t, s.Publish(ctx))
			rc, err := st.Open(ctx, k)
			require.NoError(t, err)
			got, _ := io.ReadAll(rc)
			rc.Close()
			require.Equal(t, data, got)
			rc, err = st.OpenRange(ctx, k, 6, 3)
			require.NoError(t, err)
			got, _ = io.ReadAll(rc)
			rc.Close()
			require.Equal(t, "art", string(got), "a range")
			require.Zero(t, sc.staged(t))

			// Never overwritten.
			s2, err := st.Stage(ctx, k, strings.NewReader("other"), 100)
			require.NoError(t, err)
			require.ErrorIs(t, s2.Publish(ctx), ErrExists)
			require.NoError(t, s2.Discard())
			require.Zero(t, sc.staged(t))
			rc, err = st.Open(ctx, k)
			require.NoError(t, err)
			got, _ = io.ReadAll(rc)
			rc.Close()
			require.Equal(t, data, got, "the first object is intact")

			// Too large: refused after max+1 bytes, nothing kept.
			k2, _ := Key(tenant, run, attempt, "big.bin")
			src := &countingReader{r: strings.NewReader(strings.Repeat("x", 1<<20))}
			_, err = st.Stage(ctx, k2, src, 1000)
			require.ErrorIs(t, err, ErrTooLarge)
			require.Equal(t, int64(1001), src.n, "reads stop at max+1")
			require.Zero(t, sc.staged(t))
			_, err = st.Open(ctx, k2)
			require.ErrorIs(t, err, ErrNotFound)

			require.NoError(t, st.Delete(ctx, k))
			require.NoError(t, st.Delete(ctx, k), "deleting a missing object is fine")
			_, err = st.Open(ctx, k)
			require.ErrorIs(t, err, ErrNotFound)
			for _, bad := range []string{"../etc/passwd", ".tmp/x/y", "/abs/x", "x", "a//b"} {
				_, err = st.Open(ctx, bad)
				require.ErrorIs(t, err, ErrInvalidName, "Open(%q)", bad)
				_, err = st.Stage(ctx, bad, strings.NewReader("x"), 10)
				require.ErrorIs(t, err, ErrInvalidName, "Stage(%q)", bad)
			}
		})
	}
}

// TestMultipart streams an upload larger than a part (the S3 store's
// multipart path), and cuts off one that grows past
// its limit in a later part: no part of it stays behind. Parts have S3's
// minimum size, 5 MiB.
func TestMultipart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, srv, _ := openS3(t, S3Config{PartSize: 5 << 20})
	data := make([]byte, 15<<20+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	sum := sha256.Sum256(data)
	k, _ := Key(tenant, run, attempt, "big.bin")
	s, err := st.Stage(ctx, k, &countingReader{r: bytes.NewReader(data)}, int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, hex.EncodeToString(sum[:]), s.SHA256())
	require.Len(t, s.(*s3Staged).parts, 4, "four parts")
	_, err = st.Open(ctx, k)
	require.ErrorIs(t, err, ErrNotFound, "parts are invisible before Publish")
	require.NoError(t, s.Publish(ctx))
	rc, err := st.OpenRange(ctx, k, 10<<20-5, 10)
	require.NoError(t, err)
	got, _ := io.ReadAll(rc)
	rc.Close()
	require.Equal(t, data[10<<20-5:10<<20+5], got, "a range across parts")
	rc, err = st.Open(ctx, k)
	require.NoError(t, err)
	h := sha256.New()
	_, err = io.Copy(h, rc)
	rc.Close()
	require.NoError(t, err)
	require.Equal(t, sum[:], h.Sum(nil))

	// A second multipart upload of the same key loses at publish, and its
	// parts are aborted.
	s2, err := st.Stage(ctx, k, bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	require.ErrorIs(t, s2.Publish(ctx), ErrExists)
	require.NoError(t, s2.Discard())

	k2, _ := Key(tenant, run, attempt, "over.bin")
	_, err = st.Stage(ctx, k2, bytes.NewReader(data), 10<<20+1)
	require.ErrorIs(t, err, ErrTooLarge)
	up, err := srv.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(st.cfg.Bucket)})
	require.NoError(t, err)
	require.Empty(t, up.Uploads, "no upload left behind")
}

// TestSweepStaged: uploads staged and never published nor discarded (a
// crash) are dropped by SweepStaged once older than its cut-off, and not
// before.
func TestSweepStaged(t *testing.T) {
	t.Parallel()
	for _, sc := range stores(t) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// More than a part makes the S3 store stage a multipart upload,
			// which is what outlives a crash there.
			st := sc.st
			for i := range 3 {
				k, _ := Key(tenant, run, attempt, fmt.Sprintf("crash%d", i))
				_, err := st.Stage(ctx, k, bytes.NewReader(make([]byte, DefaultPartSize+1)), DefaultPartSize+10)
				require.NoError(t, err)
			}
			require.Equal(t, 3, sc.staged(t))
			n, err := st.SweepStaged(ctx, time.Now().Add(-time.Hour), 10)
			require.NoError(t, err)
			require.Zero(t, n, "young uploads are kept: they may be in flight")
			n, err = st.SweepStaged(ctx, time.Now().Add(time.Hour), 2)
			require.NoError(t, err)
			require.Equal(t, 2, n, "bounded by the limit")
			n, err = st.SweepStaged(ctx, time.Now().Add(time.Hour), 10)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Zero(t, sc.staged(t))
		})
	}
}

// TestOpenRemovesStaleTemporaries: opening the store removes what a crash
// left staged, once unwritten for StagedAbandonedAfter, and keeps younger
// temporaries, which another process may still be writing.
func TestOpenRemovesStaleTemporaries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := OpenFS(dir)
	require.NoError(t, err)
	for _, name := range []string{"crash", "young"} {
		k, _ := Key(tenant, run, attempt, name)
		_, err = st.Stage(context.Background(), k, strings.NewReader(name), 100)
		require.NoError(t, err) // staged, never published nor discarded: a crash
	}
	st.Close()
	entries, _ := os.ReadDir(filepath.Join(dir, tmpDir))
	require.Len(t, entries, 2)
	old := time.Now().Add(-StagedAbandonedAfter - time.Minute)
	require.NoError(t, os.Chtimes(filepath.Join(dir, tmpDir, entries[0].Name()), old, old))
	st, err = OpenFS(dir)
	require.NoError(t, err)
	defer st.Close()
	left, _ := os.ReadDir(filepath.Join(dir, tmpDir))
	require.Len(t, left, 1, "the stale temporary is removed, the young one kept")
	require.Equal(t, entries[1].Name(), left[0].Name())
}

// TestOpenBesideAnUploadInFlight: a second store opened on the same
// directory while an upload is being staged (a replica restarting next to
// the one it replaces, or two replicas on one disk) leaves that upload
// alone: it finishes, publishes and is read through either store.
func TestOpenBesideAnUploadInFlight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := OpenFS(dir)
	require.NoError(t, err)
	defer first.Close()
	pr, pw := io.Pipe()
	k, _ := Key(tenant, run, attempt, "inflight")
	type staged struct {
		st  Staged
		err error
	}
	done := make(chan staged, 1)
	go func() {
		st, err := first.Stage(context.Background(), k, pr, 1<<20)
		done <- staged{st, err}
	}()
	_, err = pw.Write([]byte("first half, "))
	require.NoError(t, err)
	second, err := OpenFS(dir)
	require.NoError(t, err)
	defer second.Close()
	_, err = pw.Write([]byte("second half"))
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	res := <-done
	require.NoError(t, res.err)
	require.NoError(t, res.st.Publish(context.Background()), "published after another store opened the directory")
	for _, s := range []*FS{first, second} {
		rc, err := s.Open(context.Background(), k)
		require.NoError(t, err)
		b, err := io.ReadAll(rc)
		rc.Close()
		require.NoError(t, err)
		require.Equal(t, "first half, second half", string(b))
	}
	requireNoTemporaries(t, dir)
}

// TestConcurrentSameName is RELIABILITY A5 at the storage level: two
// attempts uploading one logical name land under their own prefixes, and
// two publishes of one key never overwrite each other. On S3 the two
// halves go through two stores on one bucket, as two replicas would.
func TestConcurrentSameName(t *testing.T) {
	t.Parallel()
	for _, sc := range stores(t) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := []Storage{sc.st, sc.st}
			if s3st, ok := sc.st.(*S3); ok {
				st[1] = openS3On(t, s3test.Shared(t), s3st.cfg.Bucket, S3Config{})
			}
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
					s, err := st[i/8].Stage(ctx, k, strings.NewReader(k), 1000)
					if err != nil {
						results[i] = err
						return
					}
					results[i] = s.Publish(ctx)
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
				rc, err := sc.st.Open(ctx, k)
				require.NoError(t, err)
				b, _ := io.ReadAll(rc)
				rc.Close()
				require.Equal(t, k, string(b), "each attempt's object holds its own bytes")
			}
			require.Zero(t, sc.staged(t))
		})
	}
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

// stopAfter is a body that stops the S3 server once n bytes were read: the
// store dies in the middle of an upload.
type stopAfter struct {
	r    io.Reader
	n    int64
	stop func()
}

func (s *stopAfter) Read(p []byte) (int, error) {
	if s.n <= 0 && s.stop != nil {
		s.stop()
		s.stop = nil
	}
	if int64(len(p)) > s.n && s.n > 0 {
		p = p[:s.n]
	}
	n, err := s.r.Read(p)
	s.n -= int64(n)
	return n, err
}

// TestS3Unavailable: the S3 server stops in the middle of a multipart
// upload, then while nothing is in flight. Every operation fails with
// ErrUnavailable (the API's 503), and once the server is back nothing of
// the interrupted upload is visible and the same key can be written.
func TestS3Unavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	st := openS3On(t, srv, bucket, S3Config{RequestTimeout: 5 * time.Second})
	k, _ := Key(tenant, run, attempt, "big.bin")
	body := &stopAfter{r: bytes.NewReader(make([]byte, 3*DefaultPartSize)), n: DefaultPartSize + 1000, stop: srv.Stop}
	_, err := st.Stage(ctx, k, body, 4*DefaultPartSize)
	require.ErrorIs(t, err, ErrUnavailable, "stopped after the first part")

	_, err = st.Open(ctx, k)
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = st.Stage(ctx, k, strings.NewReader("small"), 100)
	require.NoError(t, err, "a small upload is staged in memory")
	s, _ := st.Stage(ctx, k, strings.NewReader("small"), 100)
	require.ErrorIs(t, s.Publish(ctx), ErrUnavailable)
	require.ErrorIs(t, st.Delete(ctx, k), ErrUnavailable)
	_, err = st.SweepStaged(ctx, time.Now(), 10)
	require.ErrorIs(t, err, ErrUnavailable)

	srv.Restart(t)
	_, err = st.Open(ctx, k)
	require.ErrorIs(t, err, ErrNotFound, "nothing of the interrupted upload is visible")
	// The interrupted upload's parts may remain (its abort could not be
	// sent); the sweep drops them.
	_, err = st.SweepStaged(ctx, time.Now().Add(time.Hour), 10)
	require.NoError(t, err)
	up, err := srv.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	require.NoError(t, err)
	require.Empty(t, up.Uploads)
	s, err = st.Stage(ctx, k, strings.NewReader("after"), 100)
	require.NoError(t, err)
	require.NoError(t, s.Publish(ctx))
}

func TestParseS3URL(t *testing.T) {
	t.Parallel()
	got, err := ParseS3URL("s3://my-bucket/jobplane/prod?endpoint=http://127.0.0.1:8333&region=eu-west-1")
	require.NoError(t, err)
	require.Equal(t, S3Config{Bucket: "my-bucket", Prefix: "jobplane/prod", Endpoint: "http://127.0.0.1:8333", Region: "eu-west-1"}, got)
	got, err = ParseS3URL("s3://b12?endpoint=https://s3.example.com")
	require.NoError(t, err)
	require.Equal(t, S3Config{Bucket: "b12", Endpoint: "https://s3.example.com"}, got)
	for _, bad := range []string{
		"", "file:///x", "s3://Bad_Bucket?endpoint=http://h", "s3://b?endpoint=http://h", "s3://bucket",
		"s3://bucket?endpoint=ftp://h", "s3://bucket?endpoint=http://h&color=red", "s3://key:secret@bucket?endpoint=http://h",
		"s3://bucket/../x?endpoint=http://h", "s3://bucket/a//b?endpoint=http://h", "s3://bucket/.x?endpoint=http://h",
	} {
		_, err := ParseS3URL(bad)
		require.Error(t, err, "ParseS3URL(%q)", bad)
	}
}

func TestParseCredentialsFile(t *testing.T) {
	t.Parallel()
	file := []byte("# comment\n[default]\naws_access_key_id = AK1\naws_secret_access_key=SK1\n\n[profile ci]\naws_access_key_id = AK2\naws_secret_access_key = SK2\naws_session_token = T2\nregion = x\n[broken]\naws_access_key_id = AK3\n")
	c, err := ParseCredentialsFile(file, "")
	require.NoError(t, err)
	require.Equal(t, [3]string{"AK1", "SK1", ""}, [3]string{c.AccessKeyID, c.SecretAccessKey, c.SessionToken})
	c, err = ParseCredentialsFile(file, "ci")
	require.NoError(t, err)
	require.Equal(t, [3]string{"AK2", "SK2", "T2"}, [3]string{c.AccessKeyID, c.SecretAccessKey, c.SessionToken})
	_, err = ParseCredentialsFile(file, "broken")
	require.ErrorIs(t, err, ErrNoCredentials)
	_, err = ParseCredentialsFile(file, "missing")
	require.ErrorIs(t, err, ErrNoCredentials)
	_, err = ParseCredentialsFile([]byte("[default\n"), "")
	require.Error(t, err)
}
