package worker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

type tarEntry struct {
	name, link, data string
	typ              byte
}

func makeArchive(t *testing.T, commit string, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": commit}}))
	for _, e := range entries {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: 0o664, Size: int64(len(e.data))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if e.typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.data))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// TestUnpackHostileArchives is RELIABILITY A4's archive half: entries
// that climb out, absolute names, and writes through a symlink that points
// outside are refused, and nothing lands outside the directory.
func TestUnpackHostileArchives(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		entries []tarEntry
	}{
		{"dot-dot", []tarEntry{{name: "../escape", data: "x", typ: tar.TypeReg}}},
		{"nested dot-dot", []tarEntry{{name: "a/../../escape", data: "x", typ: tar.TypeReg}}},
		{"absolute", []tarEntry{{name: "/tmp/escape", data: "x", typ: tar.TypeReg}}},
		{"backslash", []tarEntry{{name: `..\escape`, data: "x", typ: tar.TypeReg}}},
		{"through a symlink", []tarEntry{{name: "link", link: "..", typ: tar.TypeSymlink}, {name: "link/escape", data: "x", typ: tar.TypeReg}}},
		{"through an absolute symlink", []tarEntry{{name: "link", link: "/tmp", typ: tar.TypeSymlink}, {name: "link/escape", data: "x", typ: tar.TypeReg}}},
		{"hard link", []tarEntry{{name: "h", link: "/etc/passwd", typ: tar.TypeLink}}},
		{"duplicate file", []tarEntry{{name: "f", data: "1", typ: tar.TypeReg}, {name: "f", data: "2", typ: tar.TypeReg}}},
	} {
		parent := t.TempDir()
		dir := filepath.Join(parent, "ws")
		require.NoError(t, os.Mkdir(dir, 0o700))
		_, err := unpack(bytes.NewReader(makeArchive(t, "c0ffee", c.entries...)), dir)
		require.Error(t, err, c.name)
		_, err = os.Lstat(filepath.Join(parent, "escape"))
		require.ErrorIs(t, err, os.ErrNotExist, "%s: nothing outside the directory", c.name)
	}

	dir := t.TempDir()
	commit, err := unpack(bytes.NewReader(makeArchive(t, "c0ffee",
		tarEntry{name: "src/", typ: tar.TypeDir},
		tarEntry{name: "src/a.txt", data: "hello", typ: tar.TypeReg},
		tarEntry{name: "link", link: "src/a.txt", typ: tar.TypeSymlink},
	)), dir)
	require.NoError(t, err)
	require.Equal(t, "c0ffee", commit)
	b, err := os.ReadFile(filepath.Join(dir, "link"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
}

// FuzzUnpack: whatever the entry names and link targets of a source
// archive, nothing is written outside the working directory.
func FuzzUnpack(f *testing.F) {
	f.Add("a/b.txt", "link", "..")
	f.Add("../x", "l", "/tmp")
	f.Add("link/x", "link", "../..")
	f.Add("./a", "b/../../c", "a")
	f.Add("l/x", "l", "../outside")
	f.Fuzz(func(t *testing.T, file, link, target string) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "ws")
		outside := filepath.Join(parent, "outside")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(outside, 0o700); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		if tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: link, Linkname: target}) != nil {
			return
		}
		if tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: file, Size: 1, Mode: 0o644}) != nil {
			return
		}
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		_ = zw.Close()
		_, _ = unpack(&buf, dir)
		entries, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		inside, _ := os.ReadDir(outside)
		if len(entries) != 2 || len(inside) != 0 {
			t.Fatalf("file %q, link %q -> %q wrote outside the directory: %v %v", file, link, target, entries, inside)
		}
	})
}
