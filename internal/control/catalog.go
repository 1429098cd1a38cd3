package control

import (
	"github.com/jobplane/jobplane/internal/store"
)

// CatalogSource is implemented by Definitions read from a repository: it
// lists the channels and which of them serve a branch pattern.
// Definitions without it (test fakes) have no pattern channels; package
// catalogs asks more of them (catalogs.Source).
type CatalogSource interface {
	// Channels maps each channel to its branch or branch pattern.
	Channels() map[string]string
	// IsPattern reports whether requests to the channel must name a branch.
	IsPattern(channel string) bool
}

// catalogTenant is the tenant the background sync records under: one
// repository serves the default tenant ("default" locally).
const catalogTenant = "default"

// refFor is the ref to resolve a run's channel with at dispatch: the run's
// branch for a pattern channel, none for a fixed channel (whose branch is
// the channel's own).
func (s *Service) refFor(r *store.Run) string {
	if cs, ok := s.defs.(CatalogSource); ok && cs.IsPattern(r.Channel) {
		return r.Ref
	}
	return ""
}
