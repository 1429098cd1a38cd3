package githubapp

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Sources fetches the archive of one exact commit of a repository of
// an installation (the server's, over App.Tarball).
type Sources interface {
	// Archive writes the gzipped tar of repo at commit to the writer open
	// returns, calling open only once the archive has been verified.
	Archive(ctx context.Context, installation int64, repo, commit string, open func() io.Writer) error
}

// isGitHubRepo tells a GitHub repository (owner/name) from a repository the
// server is configured with, whose names have no slash.
func isGitHubRepo(repo string) bool { return strings.Contains(repo, "/") }

// archiveGitHubSource streams the source of a GitHub run to a managed
// runner that redeemed its ticket. The repository must still be granted to
// the tenant's installation, which must be active: the ticket was issued
// for this tenant's run, and this check keeps a stale ticket from reading a
// repository the installation has since lost.
func (s *Service) archiveGitHubSource(ctx context.Context, tenant, repo, commit string, open func() io.Writer) error {
	if s.sources == nil {
		return fmt.Errorf("this server has no GitHub App source broker: %w", protocol.ErrSourceUnavailable)
	}
	in, err := s.activeInstallation(ctx, tenant)
	if err != nil {
		return err
	}
	if in == nil {
		return fmt.Errorf("repository %s: the tenant has no GitHub installation: %w", repo, protocol.ErrForbidden)
	}
	repos, err := s.store.GitHubRepoList(ctx, in.ID)
	if err != nil {
		return store.Refusal(err)
	}
	granted := false
	for _, r := range repos {
		granted = granted || strings.EqualFold(r.FullName, repo)
	}
	if !granted {
		return fmt.Errorf("repository %s is not granted to installation %d: %w", repo, in.ID, protocol.ErrForbidden)
	}
	if err := s.sources.Archive(ctx, in.ID, repo, commit, open); err != nil {
		return protocol.Refused(protocol.ErrSourceUnavailable, fmt.Errorf("archive %s at %s: %w", repo, commit, err))
	}
	return nil
}
