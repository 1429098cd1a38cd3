package store

import "context"

// Scope is what a transaction declares it may see, for PostgreSQL's
// row-level security (RELIABILITY MT3): one tenant's rows, or every tenant's
// for a named piece of control-plane work (System). The zero Scope declares
// nothing: on PostgreSQL such a transaction reads no tenant-owned row and
// cannot write one, so work that forgot its scope fails closed instead of
// seeing other tenants. SQLite has no row-level security and ignores it.
type Scope struct {
	Tenant string
	// System names cross-tenant work ("reaper", "authn", ...); it wins over
	// Tenant.
	System string
}

// IsZero reports whether the scope declares nothing.
func (s Scope) IsZero() bool { return s.Tenant == "" && s.System == "" }

type scopeKey struct{}

// WithTenant scopes the store calls made with the returned context to one
// tenant's rows.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, scopeKey{}, Scope{Tenant: tenant})
}

// WithSystem lets the store calls made with the returned context see every
// tenant's rows; reason names the work in logs and in the database
// (current_setting('app.system')). Use it only where the work is
// cross-tenant by nature: expiry sweeps, the audit sealer, outboxes, or a
// lookup by a credential that is what tells the tenant.
func WithSystem(ctx context.Context, reason string) context.Context {
	if reason == "" {
		reason = "system"
	}
	return context.WithValue(ctx, scopeKey{}, Scope{System: reason})
}

// ScopeOf returns the scope ctx declares (zero when none).
func ScopeOf(ctx context.Context) Scope {
	s, _ := ctx.Value(scopeKey{}).(Scope)
	return s
}
