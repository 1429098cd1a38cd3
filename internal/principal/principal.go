// Package principal names who calls the services: the authenticated
// Actor every service method that acts for a person or a service takes,
// the built-in service principals, the verified runner call the run
// service's runner methods take, and the one rule every admin-only method
// starts with. It imports only protocol and store's rows.
package principal

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
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

// RunnerCall is a verified runner request: the runner is the caller.
type RunnerCall struct {
	Runner  *store.Runner
	Run     string
	Attempt string
	Lease   string
	Body    []byte
	// Nonce is set when the nonce is not recorded yet
	// (VerifyRunnerDeferred): the route's first committed transaction
	// records it (store.Store.InTxNonce), and RecordNonce does before any
	// answer the route writes without one.
	Nonce *store.PendingNonce
}

// JobCall is a job's request authenticated by its run token: the tenant,
// run and attempt the verified token names. Whether the attempt still holds
// its lease is the callee's to check, in its own transaction.
type JobCall struct {
	Tenant  string
	Run     string
	Attempt string
}

// Digest is how a bearer secret (an API or a registration token) is kept:
// its SHA-256 in hex.
func Digest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
