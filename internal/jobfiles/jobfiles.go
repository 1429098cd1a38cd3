package jobfiles

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// MaxSourceBytes bounds what an unpacked source may write.
const MaxSourceBytes = 8 << 30

// Unpack extracts a gzipped tar into dir through an os.Root: entries must
// be local names, files are created exclusively, and a symlink in the
// archive cannot redirect a later entry outside dir (os.Root refuses to
// follow it there). It returns the commit of git archive's global header.
func Unpack(r io.Reader, dir string) (commit string, err error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return "", fmt.Errorf("source archive: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	tr := tar.NewReader(zr)
	var written int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return commit, nil
		}
		if err != nil {
			return "", fmt.Errorf("source archive: %w", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			commit = h.PAXRecords["comment"]
			continue
		}
		name := strings.TrimSuffix(h.Name, "/")
		if !filepath.IsLocal(name) || strings.ContainsAny(name, "\\\x00") || path.Clean(name) != name {
			return "", fmt.Errorf("source archive: entry %q is not a local path", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, 0o755)
		case tar.TypeReg:
			if written += h.Size; written > MaxSourceBytes {
				return "", fmt.Errorf("source archive: more than %d bytes", int64(MaxSourceBytes))
			}
			err = writeEntry(root, name, h, tr)
		case tar.TypeSymlink:
			if d := path.Dir(name); d != "." {
				err = root.MkdirAll(d, 0o755)
			}
			if err == nil {
				err = root.Symlink(h.Linkname, name)
			}
		default:
			return "", fmt.Errorf("source archive: entry %q has unsupported type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			return "", fmt.Errorf("source archive: %s: %w", h.Name, err)
		}
	}
}

func writeEntry(root *os.Root, name string, h *tar.Header, r io.Reader) error {
	if d := path.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	mode := os.FileMode(0o644)
	if h.Mode&0o111 != 0 {
		mode = 0o755
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, io.LimitReader(r, h.Size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Hash reads a file of root once for its size and SHA-256 (lowercase
// hex), announced with a capability request so that the server verifies
// exactly these bytes.
func Hash(root *os.Root, name string) (int64, string, error) {
	f, err := root.Open(name)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ErrNotRegular is an artifact that is not a regular file (a symlink the
// job planted, a directory).
var ErrNotRegular = errors.New("not a regular file")

// CheckArtifact looks at a declared artifact name in root without following
// a symlink: fs.ErrNotExist when the job left none, ErrNotRegular, or a
// size over maxBytes (> 0) refused with the numbers.
func CheckArtifact(root *os.Root, name string, maxBytes int64) error {
	fi, err := root.Lstat(name)
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return ErrNotRegular
	case maxBytes > 0 && fi.Size() > maxBytes:
		return fmt.Errorf("%d bytes, at most %d allowed", fi.Size(), maxBytes)
	}
	return nil
}
