package gitsync

import "github.com/go-git/go-git/v5"

// Repository opens the repository the Source reads (its mirror, for a URL),
// afresh, for readers other than the catalog: the source broker archives
// commits of it.
func (s *Source) Repository() (*git.Repository, error) { return openRepo(s.path) }
