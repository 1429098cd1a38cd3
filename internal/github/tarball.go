package github

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// maxHeaderPeek bounds how much of a tarball is buffered to find the commit
// ID in its first header before the stream is handed on.
const maxHeaderPeek = 1 << 20

// Tarball opens the source archive (gzipped tar) of one exact commit of
// repo, with a token narrowed to that repository and contents: read. The
// archive is verified before it is returned: its first entry must be the
// pax global header git archive writes, naming exactly this commit. The
// caller reads the whole archive from the returned stream (bytes are not
// re-encoded) and closes it.
func (a *App) Tarball(ctx context.Context, installation int64, repo, sha string) (io.ReadCloser, error) {
	if _, _, err := splitRepo(repo); err != nil {
		return nil, err
	}
	if !validSHA(sha) {
		return nil, fmt.Errorf("github: commit %q is not a full commit ID", sha)
	}
	tok, err := a.InstallationToken(ctx, installation, repo, PermContentsRead)
	if err != nil {
		return nil, err
	}
	// GitHub answers with a redirect to a short-lived codeload URL; the
	// client follows it and, the host being different, drops the
	// Authorization header on the way, as it should.
	resp, err := a.send(ctx, http.MethodGet, "/repos/"+repo+"/tarball/"+sha, "token "+tok.reveal(), nil)
	if errors.Is(err, ErrUnauthorized) {
		a.Forget(installation, repo, PermContentsRead)
	}
	if err != nil {
		return nil, err
	}
	head, err := verifyTarballCommit(resp.Body, sha)
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("github: tarball of %s@%s: %w", repo, sha, err)
	}
	return &replay{Reader: io.MultiReader(bytes.NewReader(head), resp.Body), Closer: resp.Body}, nil
}

type replay struct {
	io.Reader
	io.Closer
}

// verifyTarballCommit reads r until it has parsed the archive's first tar
// header and checks that it is a pax global header whose comment is sha. It
// returns every byte it consumed, so the caller can replay them.
func verifyTarballCommit(r io.Reader, sha string) ([]byte, error) {
	var seen bytes.Buffer
	tee := io.TeeReader(io.LimitReader(r, maxHeaderPeek), &seen)
	zr, err := gzip.NewReader(tee)
	if err != nil {
		return nil, fmt.Errorf("not a gzip stream: %w: %w", err, ErrSourceMismatch)
	}
	zr.Multistream(false)
	hdr, err := tar.NewReader(zr).Next()
	if err != nil {
		return nil, fmt.Errorf("read first tar header: %w: %w", err, ErrSourceMismatch)
	}
	if hdr.Typeflag != tar.TypeXGlobalHeader || hdr.PAXRecords["comment"] != sha {
		return nil, fmt.Errorf("archive names commit %q, want %q: %w", hdr.PAXRecords["comment"], sha, ErrSourceMismatch)
	}
	return seen.Bytes(), nil
}
