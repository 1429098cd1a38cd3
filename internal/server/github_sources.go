package server

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jobplane/jobplane/internal/github"
)

// githubSources is the source broker of GitHub repositories: the archive of
// one exact commit, fetched with an installation token narrowed to that
// repository and contents: read, verified by App.Tarball (its pax header
// names the commit), and streamed on.
type githubSources struct {
	app *github.App
}

// Archive writes the gzipped tar of repo at commit to the writer open
// returns; open is called only once GitHub's archive has been verified, so
// a refusal can still be answered cleanly.
func (g *githubSources) Archive(ctx context.Context, installation int64, repo, commit string, open func() io.Writer) error {
	rc, err := g.app.Tarball(ctx, installation, repo, commit)
	if err != nil {
		return err
	}
	defer rc.Close()
	return stripTopDir(open(), rc)
}

// stripTopDir re-packs a GitHub archive (every entry under one top
// directory named owner-repo-shortsha) with the entries at the root, as the
// runner unpacks a source into its working directory. The pax global header
// naming the commit is kept. Entries are copied as they are read: nothing
// is buffered beyond one header.
func stripTopDir(dst io.Writer, src io.Reader) error {
	zr, err := gzip.NewReader(src)
	if err != nil {
		return fmt.Errorf("github archive: %w", err)
	}
	tr := tar.NewReader(zr)
	zw := gzip.NewWriter(dst)
	tw := tar.NewWriter(zw)
	top := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("github archive: %w", err)
		}
		if h.Typeflag != tar.TypeXGlobalHeader {
			first, rest, _ := strings.Cut(h.Name, "/")
			if top == "" {
				if first == "" || first == "." || first == ".." {
					return fmt.Errorf("github archive: entry %q has no top directory", h.Name)
				}
				top = first
			}
			if first != top {
				return fmt.Errorf("github archive: entry %q is outside the top directory %q", h.Name, top)
			}
			if rest == "" {
				continue // the top directory itself
			}
			h.Name = rest
			// PAX records may carry the long original path; the new name wins.
			delete(h.PAXRecords, "path")
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
