// Package principal names who calls the services: the authenticated
// Actor every service method that acts for a person or a service takes,
// the built-in service principals, and the one rule every admin-only
// method starts with. It is a leaf: it imports nothing of ours.
package principal

import (
	"fmt"

	"github.com/jobplane/jobplane/internal/protocol"
)

// Actor is the authenticated caller of a service: a principal of a tenant.
type Actor struct {
	TenantID string
	Name     string
	Kind     string // user | service
	Admin    bool
}

// DefaultTenant is the tenant of a single-organization install; its admins
// operate the server (they also act for GitHub installations' tenants).
const DefaultTenant = "default"

// Built-in service principals: no principal of these names can be created.
const (
	// Scheduler requests the runs of schedules.
	Scheduler = "scheduler"
	// GitHub acts for GitHub deliveries.
	GitHub = "github"
	// System is the server itself (the admin token at start).
	System = "system"
)

// BuiltIn reports whether name is a built-in service principal.
func BuiltIn(name string) bool { return name == Scheduler || name == GitHub || name == System }

// RequireAdmin refuses an actor that is not an admin of its tenant.
func RequireAdmin(actor Actor) error {
	if !actor.Admin {
		return fmt.Errorf("%s is not an admin: %w", actor.Name, protocol.ErrForbidden)
	}
	return nil
}
