package testdb

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
)

// The production role layout (docs/operations.md "Database roles"): an
// owner that applies migrations, and the role the server connects as, which
// is neither the owner nor a superuser and has no BYPASSRLS, so that
// row-level security binds it. Roles are cluster-wide: every test shares
// these two, and each schema grants them what it needs.
const (
	OwnerRole = "jobplane_test_owner"
	AppRole   = "jobplane_test_app"
)

// dsnOf remembers the DSN of each store Postgres opened, for AppView.
var dsnOf sync.Map

// ensureRoles creates the two roles once per cluster; parallel test binaries
// may race to create them, and the loser's error is harmless.
func ensureRoles(ctx context.Context, conn *pgx.Conn) error {
	for _, role := range []string{OwnerRole, AppRole} {
		_, err := conn.Exec(ctx, `DO $$ BEGIN
			CREATE ROLE `+role+` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
		EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
		END $$`)
		if err != nil {
			return err
		}
	}
	return nil
}

// Roles is a fresh schema laid out as in production.
type Roles struct {
	// Schema is the schema's name.
	Schema string
	// SuperDSN connects as the test cluster's superuser (which bypasses
	// row-level security), OwnerDSN as the owner, AppDSN as the server's role.
	SuperDSN, OwnerDSN, AppDSN string
	// App is a store opened as the app role.
	App store.Store
}

// PostgresAppDSN prepares a schema as PostgresRoles does and returns the
// app role's DSN, for tests that start a server process with --db: the
// server then runs as in production, on migrations the owner applied.
func PostgresAppDSN(t testing.TB) string {
	t.Helper()
	super := newSchema(t, OwnerRole)
	migrateAsOwner(t, withUser(super, OwnerRole))
	grantApp(t, withUser(super, OwnerRole))
	return withUser(super, AppRole)
}

func migrateAsOwner(t testing.TB, ownerDSN string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owner, err := postgres.Open(ctx, ownerDSN)
	if err != nil {
		t.Fatalf("testdb: migrate as the owner: %v", err)
	}
	_ = owner.Close()
}

// PostgresRoles creates a schema owned by OwnerRole, migrates it as the
// owner, grants AppRole with jobplane_grant_app_role (as an operator would)
// and opens a store as AppRole, closed at cleanup.
func PostgresRoles(t testing.TB) *Roles {
	t.Helper()
	super := newSchema(t, OwnerRole)
	r := &Roles{SuperDSN: super, OwnerDSN: withUser(super, OwnerRole), AppDSN: withUser(super, AppRole), Schema: schemaOf(super)}
	migrateAsOwner(t, r.OwnerDSN)
	r.App = openApp(t, r.OwnerDSN, r.AppDSN)
	return r
}

// AppView returns a second store on the schema of s, opened as AppRole, so
// that a test can run the system under test as the server's production
// role while its fixtures keep using s; for any other store it returns s.
func AppView(t testing.TB, s store.Store) store.Store {
	t.Helper()
	dsn, ok := dsnOf.Load(s)
	if !ok {
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn.(string))
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if err := ensureRoles(ctx, conn); err != nil {
		t.Fatalf("testdb: roles: %v", err)
	}
	// A smaller pool than the server's default: the test already holds the
	// fixture store's connections, and parallel packages share the cluster.
	return openApp(t, dsn.(string), withUser(dsn.(string), AppRole)+poolCap(dsn.(string), 8))
}

func poolCap(dsn string, n int) string {
	switch {
	case strings.Contains(dsn, "pool_max_conns"):
		return ""
	case strings.Contains(dsn, "://"):
		return "&pool_max_conns=" + strconv.Itoa(n)
	}
	return " pool_max_conns=" + strconv.Itoa(n)
}

// openApp grants AppRole on the schema (connected as grantor, who owns it)
// and opens a store as AppRole.
func openApp(t testing.TB, grantor, app string) store.Store {
	t.Helper()
	grantApp(t, grantor)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, app)
	if err != nil {
		t.Fatalf("testdb: open postgres as %s: %v", AppRole, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func withUser(dsn, user string) string {
	u, err := url.Parse(dsn)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		return dsn + " user=" + user
	}
	u.User = url.User(user)
	return u.String()
}

func schemaOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Query().Get("search_path")
	}
	for _, f := range strings.Fields(dsn) {
		if v, ok := strings.CutPrefix(f, "search_path="); ok {
			return v
		}
	}
	return ""
}

// grantApp runs jobplane_grant_app_role for AppRole, connected as grantor.
func grantApp(t testing.TB, grantor string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, grantor)
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT jobplane_grant_app_role($1)`, AppRole); err != nil {
		t.Fatalf("testdb: grant the app role: %v", err)
	}
}
