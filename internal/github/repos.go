package github

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// RepositoryInfo is what jobplane reads about a repository.
type RepositoryInfo struct {
	ID            int64  `json:"id"`
	FullName      string `json:"full_name"`
	DefaultBranch string `json:"default_branch"`
	Private       bool   `json:"private"`
	Owner         struct {
		Login string `json:"login"`
		ID    int64  `json:"id"`
	} `json:"owner"`
}

// Repository reads a repository's metadata (its default branch) with a
// token narrowed to it and metadata: read, which every installation has.
func (a *App) Repository(ctx context.Context, installation int64, repo string) (*RepositoryInfo, error) {
	if _, _, err := splitRepo(repo); err != nil {
		return nil, err
	}
	out := &RepositoryInfo{}
	if err := a.repoCall(ctx, installation, repo, Permissions{"metadata": "read"}, http.MethodGet, "/repos/"+repo, nil, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CommitSHA resolves a branch (or any ref) of repo to the full commit ID it
// points at now, with a contents: read token narrowed to the repository.
// Callers pin that ID; they never fetch by branch name.
func (a *App) CommitSHA(ctx context.Context, installation int64, repo, ref string) (string, error) {
	if _, _, err := splitRepo(repo); err != nil {
		return "", err
	}
	if ref == "" {
		return "", fmt.Errorf("github: empty ref of %s", repo)
	}
	var out struct {
		SHA string `json:"sha"`
	}
	path := "/repos/" + repo + "/commits/" + url.PathEscape(ref)
	if err := a.repoCall(ctx, installation, repo, PermContentsRead, http.MethodGet, path, nil, &out); err != nil {
		return "", err
	}
	if !validSHA(out.SHA) {
		return "", fmt.Errorf("github: GET %s: %q is not a commit ID: %w", path, out.SHA, ErrUnavailable)
	}
	return out.SHA, nil
}
