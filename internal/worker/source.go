package worker

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
)

// maxSourceBytes bounds what an unpacked source may write.
const maxSourceBytes = 8 << 30

// fetchSource puts the job's source commit into its working directory: a
// managed runner redeems a fresh single-use ticket per try and unpacks the
// archive, which must carry the commit the claim named. A self-hosted
// runner is told only repository and commit (JOBPLANE_SOURCE_REPO and
// JOBPLANE_SOURCE_COMMIT); fetching is then its operator's business.
func (a *attempt) fetchSource(workspace string) error {
	src := a.asg.Source
	if src == nil {
		return nil
	}
	var done bool
	var refused error
	ok := a.call(context.Background(), "fetch source", func(c context.Context) error {
		ans, err := a.w.rc.Source(c, a.ref)
		if err != nil {
			return err
		}
		if ans.Kind == protocol.SourceKindDescriptor {
			a.system(fmt.Sprintf("jobplane: source %s at %s is not fetched on a self-hosted runner", ans.Repo, ans.Commit))
			done = true
			return nil
		}
		rd, err := a.w.rc.DownloadSource(c, ans.URL)
		if err != nil {
			if apiclient.IsCode(err, protocol.CodeTicketExpired) {
				refused = err
				return &errRefused{err}
			}
			return err
		}
		defer rd.Close()
		if err := os.RemoveAll(workspace); err != nil {
			return err
		}
		if err := os.MkdirAll(workspace, 0o700); err != nil {
			return err
		}
		commit, err := unpack(rd, workspace)
		if err != nil && apiclient.Retryable(err) {
			return err // a cut download: the next try asks for a new ticket
		}
		if err != nil {
			refused = err
			return &errRefused{err}
		}
		if commit != src.Commit {
			refused = fmt.Errorf("the archive is of commit %q, the claim named %s", commit, src.Commit)
			return &errRefused{refused}
		}
		done = true
		a.system(fmt.Sprintf("jobplane: source %s at %s unpacked", src.Repo, src.Commit))
		return nil
	})
	switch {
	case done:
		return nil
	case refused != nil:
		return fmt.Errorf("source %s: %w", src.Repo, refused)
	case !ok:
		return errors.New("source: the attempt's lease is no longer held")
	}
	return fmt.Errorf("source %s at %s could not be fetched", src.Repo, src.Commit)
}

// sourceEnv tells the job which commit it runs against.
func sourceEnv(asg *protocol.Assignment) []string {
	if asg.Source == nil {
		return nil
	}
	return []string{"JOBPLANE_SOURCE_REPO=" + asg.Source.Repo, "JOBPLANE_SOURCE_COMMIT=" + asg.Source.Commit}
}

// unpack extracts a gzipped tar into dir through an os.Root: entries must
// be local names, files are created exclusively, and a symlink in the
// archive cannot redirect a later entry outside dir (os.Root refuses to
// follow it there). It returns the commit of git archive's global header.
func unpack(r io.Reader, dir string) (commit string, err error) {
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
			if written += h.Size; written > maxSourceBytes {
				return "", fmt.Errorf("source archive: more than %d bytes", int64(maxSourceBytes))
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
