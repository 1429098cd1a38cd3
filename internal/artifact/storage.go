package artifact

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
)

// Errors of a Storage.
var (
	// ErrTooLarge: the stream had more bytes than allowed; nothing was kept.
	ErrTooLarge = errors.New("artifact too large")
	// ErrExists: an object already has that key (objects are never overwritten).
	ErrExists = errors.New("artifact already exists")
	// ErrNotFound: no object has that key.
	ErrNotFound = errors.New("artifact not found")
	// ErrUnavailable: the store did not answer or failed (down, slow,
	// full, denied); nothing is known to have changed.
	ErrUnavailable = errors.New("object store unavailable")
)

// Storage keeps artifact bytes. Implementations must never make an object
// visible before Publish, and never overwrite one.
type Storage interface {
	// Stage streams r towards the object key, hashing it, and stops with
	// ErrTooLarge (keeping nothing) as soon as more than max bytes arrive.
	// Nothing is visible under key before Publish.
	Stage(ctx context.Context, key string, r io.Reader, max int64) (Staged, error)
	// Open reads a published object.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// OpenRange reads n bytes of a published object from offset off.
	OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Delete removes a published object; a missing one is not an error.
	Delete(ctx context.Context, key string) error
	// SweepStaged drops at most limit staged uploads begun before before,
	// which only a crash leaves behind, and says how many it dropped.
	SweepStaged(ctx context.Context, before time.Time, limit int) (int, error)
}

// Staged is an upload that was received but is not visible yet.
type Staged interface {
	// Size is the number of bytes received.
	Size() int64
	// SHA256 is the lowercase hex digest of the bytes received.
	SHA256() string
	// Publish makes the object visible under its key, create-exclusive
	// (ErrExists if something is already there).
	Publish(ctx context.Context) error
	// Discard drops the staged bytes; after Publish it does nothing.
	Discard() error
}

// tmpDir holds staged uploads; it is not a valid tenant segment, so it can
// never collide with a key.
const tmpDir = ".tmp"

// FS is a Storage on the local filesystem, rooted at one directory.
type FS struct {
	root *os.Root
}

var _ Storage = (*FS)(nil)

// StagedAbandonedAfter is how long a staged upload's file may go unwritten
// before OpenFS takes it for one a crash left: an upload in flight writes
// to it at least every 30 s (the server cuts a body that stalls longer).
const StagedAbandonedAfter = time.Hour

// OpenFS opens (creating it if needed) a filesystem store at dir and removes
// the temporaries a crash left, those unwritten for StagedAbandonedAfter.
// Younger ones stay: another server process may be writing them, as when
// a replica restarts next to the one it replaces on one directory (the
// retention sweep removes them later, once they are stale).
func OpenFS(dir string) (*FS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create artifact directory: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open artifact directory: %w", err)
	}
	if err := root.MkdirAll(tmpDir, 0o700); err != nil {
		root.Close()
		return nil, fmt.Errorf("create upload directory: %w", err)
	}
	s := &FS{root: root}
	// File times are the real clock's, whatever clock the server runs on.
	if _, err := s.SweepStaged(context.Background(), clock.Real{}.Now().Add(-StagedAbandonedAfter), math.MaxInt); err != nil {
		root.Close()
		return nil, fmt.Errorf("remove stale uploads: %w", err)
	}
	return s, nil
}

// Close releases the directory.
func (s *FS) Close() error { return s.root.Close() }

// Stage writes r to a temporary file under the root.
func (s *FS) Stage(ctx context.Context, key string, r io.Reader, max int64) (Staged, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	name := path.Join(tmpDir, hex.EncodeToString(rnd[:]))
	f, err := s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("stage upload: %w", err)
	}
	st := &fsStaged{s: s, tmp: name, key: key}
	h := sha256.New()
	// One byte more than allowed tells "exactly max" from "too large"
	// without reading any further.
	n, err := io.Copy(io.MultiWriter(diskWriter{f}, h), io.LimitReader(ctxReader{ctx, r}, max+1))
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%w: %v", ErrUnavailable, cerr)
	}
	if err == nil && n > max {
		err = fmt.Errorf("more than %d bytes: %w", max, ErrTooLarge)
	}
	if err != nil {
		_ = st.Discard()
		return nil, err
	}
	st.size, st.sum = n, hex.EncodeToString(h.Sum(nil))
	return st, nil
}

// Open reads a published object.
func (s *FS) Open(_ context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	f, err := s.root.Open(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return f, err
}

// OpenRange reads n bytes of a published object from offset off.
func (s *FS) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("open %s: bad range %d+%d", key, off, n)
	}
	rc, err := s.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	f := rc.(*os.File)
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, n), f}, nil
}

// SweepStaged removes temporary files older than before.
func (s *FS) SweepStaged(_ context.Context, before time.Time, limit int) (int, error) {
	d, err := s.root.Open(tmpDir)
	if err != nil {
		return 0, fmt.Errorf("list staged uploads: %w", err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return 0, fmt.Errorf("list staged uploads: %w", err)
	}
	swept := 0
	for _, e := range entries {
		if swept >= limit {
			break
		}
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(before) {
			continue
		}
		if err := s.root.Remove(path.Join(tmpDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return swept, fmt.Errorf("remove staged upload: %w", err)
		}
		swept++
	}
	return swept, nil
}

// Delete removes a published object.
func (s *FS) Delete(_ context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	err := s.root.Remove(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// checkKey accepts a clean, local, multi-segment key outside the staging
// directory.
func checkKey(key string) error {
	first, _, _ := strings.Cut(key, "/")
	if key == "" || path.Clean(key) != key || path.IsAbs(key) || !fsValid(key) || path.Dir(key) == "." ||
		first == tmpDir {
		return fmt.Errorf("%w: key %q", ErrInvalidName, key)
	}
	return nil
}

func fsValid(key string) bool { return fs.ValidPath(key) }

type fsStaged struct {
	s         *FS
	tmp       string
	key       string
	size      int64
	sum       string
	published bool
}

func (st *fsStaged) Size() int64    { return st.size }
func (st *fsStaged) SHA256() string { return st.sum }

// Publish hard-links the temporary file to its key, which fails if the key
// exists (rename would silently replace it), then drops the temporary name.
func (st *fsStaged) Publish(_ context.Context) error {
	key := st.key
	if err := checkKey(key); err != nil {
		return err
	}
	if err := st.s.root.MkdirAll(path.Dir(key), 0o700); err != nil {
		return fmt.Errorf("publish %s: %w", key, err)
	}
	if err := st.s.root.Link(st.tmp, key); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("publish %s: %w", key, ErrExists)
		}
		return fmt.Errorf("publish %s: %w", key, err)
	}
	st.published = true
	_ = st.s.root.Remove(st.tmp)
	return nil
}

func (st *fsStaged) Discard() error {
	if st.published {
		return nil
	}
	err := st.s.root.Remove(st.tmp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// diskWriter marks a failed write (a full disk) as the store's failure,
// apart from a failed read, which is the client's.
type diskWriter struct{ f *os.File }

func (w diskWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return n, err
}

// ctxReader stops a copy when its context ends (a client gone, a server
// shutting down).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
