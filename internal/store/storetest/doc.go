// Package storetest is the one conformance suite every store.Store must pass.
//
// The services depend on the documented semantics of the store interface, not
// on a backend, so both backends run exactly these tests (from their own
// packages' tests). Time-dependent cases pass fixed Now values instead of
// sleeping; the concurrency cases (claims, registration tokens, row locks) are
// the ones a backend is most likely to get subtly wrong.
package storetest

import (
	"context"

	"github.com/jobplane/jobplane/internal/store"
)

// bg is the context of the suite's store calls. It declares a system scope:
// the suite checks what each method does, across tenants, and runs as the
// production app role on PostgreSQL (postgres.TestConformanceAsAppRole),
// where row-level security shows a call without a scope nothing.
func bg() context.Context { return store.WithSystem(context.Background(), "storetest") }
