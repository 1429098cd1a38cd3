package logarchive

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// lines makes n lines of one attempt with IDs from first, every step.
func lines(n int, first, step int64) []*store.LogLine {
	out := make([]*store.LogLine, n)
	for i := range out {
		out[i] = &store.LogLine{ID: first + int64(i)*step, RunID: "run_1", AttemptID: "att_1", Seq: int64(i / 10), Idx: i % 10,
			At: t0.Add(time.Duration(i) * time.Microsecond), Stream: []string{"stdout", "stderr"}[i%2],
			Text: fmt.Sprintf("line %d: %s", i, strings.Repeat("é", i%7))}
	}
	return out
}

func source(ls []*store.LogLine) Source {
	return func(_ context.Context, after int64, n int) ([]*store.LogLine, error) {
		var out []*store.LogLine
		for _, l := range ls {
			if l.ID > after && len(out) < n {
				out = append(out, l)
			}
		}
		return out, nil
	}
}

func fsStore(t *testing.T) *artifact.FS {
	fs, err := artifact.OpenFS(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { fs.Close() })
	return fs
}

// readAll pages through the archive alone with the given page size.
func readAll(t *testing.T, r *Reader, a *store.LogArchive, after int64, page int) []*store.LogLine {
	var out []*store.LogLine
	for {
		ls, err := r.read(context.Background(), a, after, page)
		require.NoError(t, err)
		require.LessOrEqual(t, len(ls), page)
		if len(ls) == 0 {
			return out
		}
		out = append(out, ls...)
		after = ls[len(ls)-1].ID
	}
}

// TestWriteAndReadPages: an archive of several members reads back every
// line, as written, from any cursor and with any page size, reading only
// the members a page needs.
func TestWriteAndReadPages(t *testing.T) {
	old := blockLines
	blockLines = 100
	t.Cleanup(func() { blockLines = old })
	ls := lines(1050, 10, 3)
	fs := fsStore(t)
	a, err := Write(context.Background(), fs, "tnt_1", "run_1", "att_1", source(ls))
	require.NoError(t, err)
	require.Equal(t, Key("tnt_1", "run_1", "att_1"), a.Key)
	require.EqualValues(t, 1050, a.Lines)
	require.EqualValues(t, 10, a.FirstID)
	require.Equal(t, ls[len(ls)-1].ID, a.LastID)
	require.Len(t, a.Blocks, 11)
	require.Equal(t, store.LogArchiveMoving, a.State)
	r := &Reader{Objects: fs}
	for _, page := range []int{1, 7, 100, 101, 5000} {
		require.Equal(t, ls, readAll(t, r, a, 0, page), "page %d", page)
	}
	for _, after := range []int64{9, 10, 11, 12, 307, 309, 310, ls[1049].ID - 1} {
		var want []*store.LogLine
		for _, l := range ls {
			if l.ID > after {
				want = append(want, l)
			}
		}
		require.Equal(t, want, readAll(t, r, a, after, 60), "after %d", after)
	}
	got, err := r.read(context.Background(), a, ls[1049].ID, 10)
	require.NoError(t, err)
	require.Empty(t, got)

	// The object is a plain gzip file of JSON lines.
	rc, err := fs.Open(context.Background(), a.Key)
	require.NoError(t, err)
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
	require.NoError(t, err)
	raw, err := io.ReadAll(gz)
	require.NoError(t, err)
	require.Equal(t, 1050, bytes.Count(raw, []byte("\n")))
}

// TestWriteAgainReusesTheObject: a move interrupted after publishing
// writes the same object again and uses the one there; an object of other
// bytes under the key (another build's) is left alone and the lines go
// under a second key.
func TestWriteAgainReusesTheObject(t *testing.T) {
	ctx := context.Background()
	ls := lines(30, 1, 1)
	fs := fsStore(t)
	a, err := Write(ctx, fs, "tnt_1", "run_1", "att_1", source(ls))
	require.NoError(t, err)
	b, err := Write(ctx, fs, "tnt_1", "run_1", "att_1", source(ls))
	require.NoError(t, err)
	require.Equal(t, a, b)

	st, err := fs.Stage(ctx, Key("tnt_1", "run_1", "att_2"), strings.NewReader("other bytes"), 100)
	require.NoError(t, err)
	require.NoError(t, st.Publish(ctx))
	for _, l := range ls {
		l.AttemptID = "att_2"
	}
	c, err := Write(ctx, fs, "tnt_1", "run_1", "att_2", source(ls))
	require.NoError(t, err)
	require.NotEqual(t, Key("tnt_1", "run_1", "att_2"), c.Key)
	require.Equal(t, ls, readAll(t, &Reader{Objects: fs}, c, 0, 10))

	none, err := Write(ctx, fs, "tnt_1", "run_1", "att_3", source(nil))
	require.NoError(t, err)
	require.Nil(t, none, "no lines, no archive")
	_, err = fs.Open(ctx, Key("tnt_1", "run_1", "att_3"))
	require.ErrorIs(t, err, artifact.ErrNotFound)
}

// TestWriteFailures: a source failing or a store failing publishes nothing.
func TestWriteFailures(t *testing.T) {
	ctx := context.Background()
	fs := fsStore(t)
	boom := errors.New("database gone")
	_, err := Write(ctx, fs, "tnt_1", "run_1", "att_1", func(context.Context, int64, int) ([]*store.LogLine, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	_, err = fs.Open(ctx, Key("tnt_1", "run_1", "att_1"))
	require.ErrorIs(t, err, artifact.ErrNotFound)
	_, err = Write(ctx, downStore{fs}, "tnt_1", "run_1", "att_1", source(lines(5000, 1, 1)))
	require.ErrorIs(t, err, artifact.ErrUnavailable)
}

// downStore fails every call with ErrUnavailable.
type downStore struct{ artifact.Storage }

func (downStore) Stage(_ context.Context, _ string, r io.Reader, _ int64) (artifact.Staged, error) {
	_, _ = io.CopyN(io.Discard, r, 10)
	return nil, artifact.ErrUnavailable
}

func (downStore) OpenRange(context.Context, string, int64, int64) (io.ReadCloser, error) {
	return nil, fmt.Errorf("get: %w", artifact.ErrUnavailable)
}

// TestCorruptArchiveIsRefused: bytes that are not what the row records
// are an error, never lines.
func TestCorruptArchiveIsRefused(t *testing.T) {
	ctx := context.Background()
	ls := lines(20, 1, 1)
	fs := fsStore(t)
	a, err := Write(ctx, fs, "tnt_1", "run_1", "att_1", source(ls))
	require.NoError(t, err)
	r := &Reader{Objects: fs}
	for name, mutate := range map[string]func(b *store.LogArchive){
		"fewer lines":    func(b *store.LogArchive) { b.Blocks[0].Lines-- },
		"more raw bytes": func(b *store.LogArchive) { b.Blocks[0].Raw++ },
		"less raw bytes": func(b *store.LogArchive) { b.Blocks[0].Raw-- },
		"id range":       func(b *store.LogArchive) { b.LastID = 5 },
		"first id":       func(b *store.LogArchive) { b.Blocks[0].FirstID = 0 },
		"offset":         func(b *store.LogArchive) { b.Blocks[0].Offset = 3 },
		"size":           func(b *store.LogArchive) { b.Size += 10 },
		"no blocks":      func(b *store.LogArchive) { b.Blocks = nil },
	} {
		b := *a
		b.Blocks = append([]store.LogBlock(nil), a.Blocks...)
		mutate(&b)
		_, err := r.read(ctx, &b, 0, 100)
		require.Error(t, err, name)
	}
}

// TestReaderUnavailable: the object store down makes a read of moved logs
// protocol.ErrUnavailable (503 unavailable).
func TestReaderUnavailable(t *testing.T) {
	fs := fsStore(t)
	a, err := Write(context.Background(), fs, "tnt_1", "run_1", "att_1", source(lines(5, 1, 1)))
	require.NoError(t, err)
	r := &Reader{Store: archivedOnly{a: a}, Objects: downStore{fs}}
	_, err = r.Lines(context.Background(), &store.Run{ID: "run_1", State: store.RunSucceeded}, 0, 10)
	require.ErrorIs(t, err, protocol.ErrUnavailable)
	// A live run's logs are never read from the object store.
	_, err = r.Lines(context.Background(), &store.Run{ID: "run_1", State: store.RunRunning}, 0, 10)
	require.NoError(t, err)
}

// archivedOnly is a store with no lines and one archive.
type archivedOnly struct {
	store.Store
	a *store.LogArchive
}

func (archivedOnly) LogList(context.Context, *store.LogListParams) ([]*store.LogLine, error) {
	return nil, nil
}

func (s archivedOnly) LogArchiveList(context.Context, string) ([]*store.LogArchive, error) {
	return []*store.LogArchive{s.a}, nil
}

func TestMerge(t *testing.T) {
	l := func(ids ...int64) []*store.LogLine {
		var out []*store.LogLine
		for _, id := range ids {
			out = append(out, &store.LogLine{ID: id})
		}
		return out
	}
	require.Equal(t, l(1, 2, 3, 5, 8), merge(l(1, 3, 5), l(2, 3, 8)))
	require.Equal(t, l(1), merge(nil, l(1)))
	require.Equal(t, l(1), merge(l(1), nil))
}

// FuzzDecode: any bytes under a row decode to lines in the row's range,
// in order and as many as recorded, or to an error; never a panic or an
// unbounded read.
func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	enc := newEncoder(&buf)
	for _, l := range lines(3, 1, 1) {
		require.NoError(f, enc.add(l))
	}
	require.NoError(f, enc.flush())
	f.Add(buf.Bytes(), int64(3), int64(enc.blocks[0].Raw))
	f.Add([]byte{0x1f, 0x8b}, int64(1), int64(10))
	f.Fuzz(func(t *testing.T, b []byte, n, raw int64) {
		if n < 0 || n > 1000 || raw < 0 || raw > 1<<20 {
			return
		}
		a := &store.LogArchive{Key: "k", FirstID: 1, LastID: 3, Lines: n}
		got, err := decode(bytes.NewReader(b), a, []store.LogBlock{{FirstID: 1, Lines: int(n), Raw: raw}})
		if err != nil {
			return
		}
		require.Len(t, got, int(n))
		for i, l := range got {
			require.True(t, l.ID >= 1 && l.ID <= 3)
			if i > 0 {
				require.Greater(t, l.ID, got[i-1].ID)
			}
		}
	})
}

// TestWriteLinesGoneBeforeTheAlternativeKey: when the key holds other bytes
// and the lines are gone by the time they are read again for the
// alternative key, nothing is archived (and nothing panics).
func TestWriteLinesGoneBeforeTheAlternativeKey(t *testing.T) {
	ctx := context.Background()
	fs := fsStore(t)
	st, err := fs.Stage(ctx, Key("tnt_1", "run_1", "att_1"), strings.NewReader("other bytes"), 100)
	require.NoError(t, err)
	require.NoError(t, st.Publish(ctx))
	reads := 0
	ls := lines(30, 1, 1)
	src := func(ctx context.Context, after int64, n int) ([]*store.LogLine, error) {
		if after == 0 {
			reads++
		}
		if reads > 1 {
			return nil, nil // deleted since the first read
		}
		return source(ls)(ctx, after, n)
	}
	a, err := Write(ctx, fs, "tnt_1", "run_1", "att_1", src)
	require.NoError(t, err)
	require.Nil(t, a)
	require.Equal(t, 2, reads)
}
