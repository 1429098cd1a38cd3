package server

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// DefinitionsRepoName is the repository of an installation's account that
// holds the tenant's own definitions.
const DefinitionsRepoName = ".jobplane"

// maxDefinitionsArchive bounds the uncompressed bytes read from the archive
// of a .jobplane repository.
const maxDefinitionsArchive = 64 << 20

// githubCatalogs reads tenants' definitions from their installation's
// .jobplane repository (githubapp.Catalogs). The default branch's head
// is resolved on every use (two small API calls with cached tokens) and the
// archive fetched and parsed only when the head changed, so a push to
// .jobplane applies to the next pull request without any push webhook.
type githubCatalogs struct {
	app     *github.App
	store   store.Store
	channel string
	clock   clock.Clock
	log     *slog.Logger

	mu sync.Mutex
	// headAt is when each installation's head was last read, for
	// TenantCatalogWithin.
	headAt map[int64]time.Time
	// good is each installation's newest catalog that validated.
	good map[int64]*pinned
	// bad remembers a head that did not validate, so that it is not
	// fetched again on every delivery.
	bad map[int64]string
}

func newGitHubCatalogs(app *github.App, st store.Store, channel string, clk clock.Clock, log *slog.Logger) *githubCatalogs {
	if clk == nil {
		clk = clock.Real{}
	}
	return &githubCatalogs{app: app, store: st, channel: channel, clock: clk, log: log, good: map[int64]*pinned{},
		bad: map[int64]string{}, headAt: map[int64]time.Time{}}
}

// TenantCatalogWithin implements githubapp.CatalogsWithin: the last
// good catalog when its head was confirmed less than maxAge ago, else
// TenantCatalog. Whether the installation grants .jobplane is still read
// from the database every time, so losing it applies at once.
func (g *githubCatalogs) TenantCatalogWithin(ctx context.Context, in *store.GitHubInstallation, maxAge time.Duration) (control.Catalog, error) {
	repo, err := g.definitionsRepo(ctx, in)
	if err != nil || repo == "" {
		return nil, err
	}
	g.mu.Lock()
	cur, at, bad := g.good[in.ID], g.headAt[in.ID], g.bad[in.ID]
	g.mu.Unlock()
	if !at.IsZero() && g.clock.Now().Sub(at) < maxAge {
		if cur != nil {
			return cur, nil
		}
		if bad != "" {
			return g.fallback(in.ID, repo, fmt.Errorf("%s at %s does not validate", repo, bad))
		}
	}
	return g.TenantCatalog(ctx, in)
}

// definitionsRepo is the installation's .jobplane repository, or "".
func (g *githubCatalogs) definitionsRepo(ctx context.Context, in *store.GitHubInstallation) (string, error) {
	repos, err := g.store.GitHubRepoList(ctx, in.ID)
	if err != nil {
		return "", err
	}
	for _, r := range repos {
		if strings.EqualFold(r.FullName, in.Account+"/"+DefinitionsRepoName) {
			return r.FullName, nil
		}
	}
	return "", nil
}

// TenantCatalog implements githubapp.Catalogs.
func (g *githubCatalogs) TenantCatalog(ctx context.Context, in *store.GitHubInstallation) (control.Catalog, error) {
	repo, err := g.definitionsRepo(ctx, in)
	if err != nil || repo == "" {
		return nil, err // without .jobplane the server's definitions apply
	}
	info, err := g.app.Repository(ctx, in.ID, repo)
	if err != nil {
		return g.fallback(in.ID, repo, err)
	}
	sha, err := g.app.CommitSHA(ctx, in.ID, repo, info.DefaultBranch)
	if err != nil {
		return g.fallback(in.ID, repo, err)
	}
	now := g.clock.Now()
	g.mu.Lock()
	cur, known := g.good[in.ID], g.bad[in.ID] == sha
	g.headAt[in.ID] = now
	g.mu.Unlock()
	if cur != nil && cur.snap.Commit == sha {
		return cur, nil
	}
	if known {
		return g.fallback(in.ID, repo, fmt.Errorf("%s at %s does not validate", repo, sha))
	}
	cat, err := g.fetch(ctx, in.ID, repo, sha)
	if err != nil {
		if errors.Is(err, errInvalidDefinitions) {
			g.mu.Lock()
			g.bad[in.ID] = sha
			g.mu.Unlock()
		}
		return g.fallback(in.ID, repo, err)
	}
	p := &pinned{snap: &gitsync.Snapshot{Channel: g.channel, Branch: info.DefaultBranch, Commit: sha, Head: sha,
		Protected: true, Catalog: cat}}
	g.mu.Lock()
	g.good[in.ID] = p
	delete(g.bad, in.ID)
	g.mu.Unlock()
	g.log.Info("github: tenant definitions loaded", "installation", in.ID, "repo", repo, "commit", sha)
	return p, nil
}

// fallback keeps the last catalog that validated when the head cannot be
// read or does not validate, like a channel's last good commit; without
// one the request fails rather than falling back to the server's
// definitions, which were not written for this tenant.
func (g *githubCatalogs) fallback(installation int64, repo string, cause error) (control.Catalog, error) {
	g.mu.Lock()
	cur := g.good[installation]
	g.mu.Unlock()
	if cur != nil {
		g.log.Warn("github: tenant definitions not refreshed; keeping the last good commit", "installation", installation,
			"repo", repo, "commit", cur.snap.Commit, "err", cause)
		return cur, nil
	}
	if github.Retryable(cause) {
		return nil, protocol.Refused(protocol.ErrUnavailable, fmt.Errorf("definitions of %s: %w", repo, cause))
	}
	return nil, protocol.Refused(protocol.ErrCatalogUnavailable, fmt.Errorf("definitions of %s: %w", repo, cause))
}

var errInvalidDefinitions = errors.New("definitions do not validate")

// fetch reads the definition files from the archive of one exact commit
// (verified by App.Tarball) and parses them.
func (g *githubCatalogs) fetch(ctx context.Context, installation int64, repo, sha string) (*catalog.Catalog, error) {
	rc, err := g.app.Tarball(ctx, installation, repo, sha)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	files, err := definitionFiles(rc)
	if err != nil {
		return nil, fmt.Errorf("archive of %s at %s: %w", repo, sha, err)
	}
	cat, errs := catalog.Parse(files)
	if len(errs) > 0 {
		var b strings.Builder
		for i, e := range errs {
			if i == 5 {
				fmt.Fprintf(&b, "; and %d more", len(errs)-5)
				break
			}
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
		}
		return nil, fmt.Errorf("%s at %s: %s: %w", repo, sha, b.String(), errInvalidDefinitions)
	}
	return cat, nil
}

// definitionFiles extracts the definition files of a gzipped tar whose
// entries sit under one top directory, as GitHub's archives do.
func definitionFiles(r io.Reader) (map[string][]byte, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(io.LimitReader(zr, maxDefinitionsArchive))
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		_, rel, ok := strings.Cut(h.Name, "/")
		if !ok || !catalog.IsDefinitionFile(rel) {
			continue
		}
		if h.Size > catalog.MaxFileSize {
			return nil, fmt.Errorf("%s is larger than %d bytes", rel, catalog.MaxFileSize)
		}
		data, err := io.ReadAll(io.LimitReader(tr, catalog.MaxFileSize+1))
		if err != nil {
			return nil, err
		}
		files[rel] = data
	}
}
