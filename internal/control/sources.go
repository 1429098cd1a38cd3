package control

import (
	"fmt"
	"strings"

	"github.com/jobplane/jobplane/internal/protocol"
)

// SpecSource is the code a run executes in: a configured repository and the
// commit its branch pointed at when the run was requested.
type SpecSource struct {
	Repo   string `json:"repo"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
}

// SourceHeads pins branches of the configured source repositories to
// commits (a *source.Broker).
type SourceHeads interface {
	// Head returns the commit a branch of a repository points at.
	Head(repo, branch string) (string, error)
}

// pinSource resolves the job's source branch (default: the run's ref) to
// the commit it points at now, so that every attempt of the run gets the
// same code.
func (s *Service) pinSource(spec *Spec, ref string) error {
	if spec.Source == nil || isHostedRepo(spec.Source.Repo) {
		return nil // a GitHub run's source is pinned to the pull request's head
	}
	if s.sources == nil {
		return fmt.Errorf("job %s needs source repository %s and this server has none configured (--source-repo): %w", spec.Name, spec.Source.Repo, protocol.ErrSourceUnavailable)
	}
	if spec.Source.Branch == "" {
		spec.Source.Branch = ref
	}
	commit, err := s.sources.Head(spec.Source.Repo, spec.Source.Branch)
	if err != nil {
		return protocol.Refused(protocol.ErrSourceUnavailable, fmt.Errorf("source of job %s: %w", spec.Name, err))
	}
	spec.Source.Commit = commit
	return nil
}

// isHostedRepo tells a repository of a Git host (owner/name, served by the
// Tenants integration) from a repository the server is configured with,
// whose names have no slash.
func isHostedRepo(repo string) bool { return strings.Contains(repo, "/") }
