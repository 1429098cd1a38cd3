package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/storetest"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// RELIABILITY MT3: row-level security is the backstop of tenant isolation.
// The tests run as the production role layout (testdb.PostgresRoles): the
// test cluster's superuser bypasses row security, so a test connected as it
// would prove nothing.

// TestConformanceAsAppRole runs the store conformance suite as the app role:
// every store method, in and out of InTx, works with a declared scope and the
// grants jobplane_grant_app_role gives.
func TestConformanceAsAppRole(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return testdb.PostgresRoles(t).App })
}

// TestRLSLayout is the invariant half of MT3's checker, read from the
// catalog: the app role is neither superuser, BYPASSRLS, nor the owner of
// any table, and every table with a tenant column enables and forces row
// security and has a policy.
func TestRLSLayout(t *testing.T) {
	ctx := context.Background()
	r := testdb.PostgresRoles(t)
	conn, err := pgx.Connect(ctx, r.SuperDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)

	var super, bypass bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1`, testdb.AppRole).Scan(&super, &bypass))
	require.False(t, super, "the app role is a superuser")
	require.False(t, bypass, "the app role has BYPASSRLS")
	var owned int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tableowner = $2`, r.Schema, testdb.AppRole).Scan(&owned))
	require.Zero(t, owned, "the app role owns tables")

	rows, err := conn.Query(ctx, `
		SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
		       EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r'
		  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped)
		ORDER BY 1`, r.Schema)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		var enabled, forced, policy bool
		require.NoError(t, rows.Scan(&name, &enabled, &forced, &policy))
		require.True(t, enabled && forced && policy, "table %s: row security enabled=%v forced=%v policy=%v", name, enabled, forced, policy)
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, tables, "runs")
	require.GreaterOrEqual(t, len(tables), 17, "tables with a tenant column: %v", tables)
}

// tenantDB is a way of running one statement in a transaction that declares
// a tenant ("" declares none); the checker runs the same probes through a
// correct one and through broken ones.
type tenantDB interface {
	strings(ctx context.Context, tenant, sql string) ([]string, error)
}

// storeDB declares the tenant as the store does: through the context.
type storeDB struct {
	s      *postgres.Store
	outTx  bool // the store's out-of-transaction path instead of InTx
	system bool // declare the system scope instead of a tenant
}

func (d storeDB) strings(ctx context.Context, tenant, sql string) ([]string, error) {
	if tenant != "" {
		ctx = store.WithTenant(ctx, tenant)
	}
	if d.outTx {
		return postgres.PoolStrings(ctx, d.s, sql)
	}
	return postgres.TxStrings(ctx, d.s, sql)
}

// sessionDB is the broken variant "session-level SET": the tenant is set
// with SET, not SET LOCAL, so it outlives the transaction on the pooled
// connection.
type sessionDB struct{ pool *pgxpool.Pool }

func (d sessionDB) strings(ctx context.Context, tenant, sql string) (out []string, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if tenant != "" {
			if _, err := tx.Exec(ctx, `SELECT set_config('app.tenant_id', $1, false)`, tenant); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, sql)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return out, err
}

// checkIsolation is MT3's checker. db must hold one connection, so that
// every probe reuses the connection of the one before. Tenants a and b each
// own a run; it returns what leaked, nil when nothing did.
func checkIsolation(ctx context.Context, db tenantDB, a, b string) error {
	var leaks []error
	for _, tn := range []string{a, b} {
		// A query missing its tenant predicate sees its own tenant's rows only.
		got, err := db.strings(ctx, tn, `SELECT tenant FROM runs`)
		if err != nil {
			return err
		}
		if len(got) == 0 || slices.ContainsFunc(got, func(s string) bool { return s != tn }) {
			leaks = append(leaks, fmt.Errorf("in %s's scope an unfiltered query saw tenants %v", tn, got))
		}
		// The next transaction on the same connection starts with no tenant.
		got, err = db.strings(ctx, "", `SELECT coalesce(current_setting('app.tenant_id', true), '')`)
		if err != nil {
			return err
		}
		if got[0] != "" {
			leaks = append(leaks, fmt.Errorf("after %s's transaction the next one started with app.tenant_id=%q", tn, got[0]))
		}
		// And, having declared nothing, sees nothing.
		got, err = db.strings(ctx, "", `SELECT tenant FROM runs`)
		if err != nil {
			return err
		}
		if len(got) != 0 {
			leaks = append(leaks, fmt.Errorf("after %s's transaction an unscoped query saw tenants %v", tn, got))
		}
	}
	// Without a scope nothing is written; in a's scope nothing of b's.
	for _, c := range []struct{ scope, row string }{{"", a}, {a, b}} {
		_, err := db.strings(ctx, c.scope, `INSERT INTO secrets (tenant, name, channel, ciphertext, updated_at)
			VALUES ('`+c.row+`', 'probe', '', '\x00', now()) RETURNING tenant`)
		if !isRLSRefusal(err) {
			leaks = append(leaks, fmt.Errorf("an insert of a %s row in scope %q was not refused by row security: %v", c.row, c.scope, err))
		}
	}
	return errors.Join(leaks...)
}

func isRLSRefusal(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// isolationFixture makes tenants A and B with one run each, through the
// app store and the scopes the control plane would use.
func isolationFixture(t testing.TB, s store.Store) (a, b string) {
	t.Helper()
	ctx := store.WithSystem(context.Background(), "test fixture")
	ta, err := s.TenantEnsure(ctx, "tenant-a", nil)
	require.NoError(t, err)
	tb, err := s.TenantEnsure(ctx, "tenant-b", nil)
	require.NoError(t, err)
	for _, tn := range []string{ta.ID, tb.ID} {
		now := time.Now()
		require.NoError(t, s.RunCreate(store.WithTenant(context.Background(), tn), &store.Run{
			ID: "run_" + tn, Tenant: tn, Job: "echo", Channel: "prod", Ref: "main", Commit: "c", Actor: "alice",
			Reason: "test", State: store.RunQueued, MaxAttempts: 1, CreatedAt: now, UpdatedAt: now}))
	}
	return ta.ID, tb.ID
}

func withPoolSize1(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn + " pool_max_conns=1"
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	return u.String()
}

func openStore(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestRLSIsolation: through the app role, in and out of InTx, on one pooled
// connection, the checker finds nothing; and the store's own methods, with
// another tenant's scope or none, do not see the other tenant.
func TestRLSIsolation(t *testing.T) {
	ctx := context.Background()
	r := testdb.PostgresRoles(t)
	a, b := isolationFixture(t, r.App)
	app := openStore(t, withPoolSize1(r.AppDSN))
	require.NoError(t, checkIsolation(ctx, storeDB{s: app}, a, b))
	require.NoError(t, checkIsolation(ctx, storeDB{s: app, outTx: true}, a, b))

	// A store method that forgot a tenant predicate would still be bound:
	// B's run is unknown in A's scope, and in no scope at all.
	_, err := app.RunGetByID(store.WithTenant(ctx, a), "run_"+b, false)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = app.RunGetByID(store.WithTenant(ctx, b), "run_"+b, false)
	require.NoError(t, err)
	_, err = app.RunGetByID(ctx, "run_"+b, false)
	require.ErrorIs(t, err, store.ErrNotFound)
	// Writing another tenant's row from A's scope is refused.
	now := time.Now()
	err = app.RunCreate(store.WithTenant(ctx, a), &store.Run{ID: "run_x", Tenant: b, Job: "echo", Channel: "prod",
		Ref: "main", Commit: "c", Actor: "mallory", Reason: "x", State: store.RunQueued, MaxAttempts: 1, CreatedAt: now, UpdatedAt: now})
	require.True(t, isRLSRefusal(err), "cross-tenant insert: %v", err)
	// In one transaction (a group commit), each statement has the scope of
	// its own context, and one without any sees nothing.
	each, err := postgres.TxStringsEach(store.WithTenant(ctx, a), app, `SELECT tenant FROM runs`,
		store.WithTenant(ctx, a), store.WithTenant(ctx, b), ctx, store.WithTenant(ctx, a))
	require.NoError(t, err)
	require.Equal(t, [][]string{{a}, {b}, {}, {a}}, each)
	// The system scope sees both (the reaper, the scheduler, ...).
	got, err := postgres.TxStrings(store.WithSystem(ctx, "test"), app, `SELECT tenant FROM runs ORDER BY tenant`)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{a, b}, got)
}

// TestRLSScopeIsQuoted: a scope is sent as text in the BEGIN message; a
// tenant ID with quotes or backslashes is a value, never SQL.
func TestRLSScopeIsQuoted(t *testing.T) {
	ctx := context.Background()
	r := testdb.PostgresRoles(t)
	app := openStore(t, withPoolSize1(r.AppDSN))
	for _, evil := range []string{`x'); SELECT set_config('app.system', 'on', false); --`, `a\'b`, `\`, `'`} {
		got, err := postgres.TxStrings(store.WithTenant(ctx, evil), app,
			`SELECT current_setting('app.tenant_id', true) || '|' || current_setting('app.system', true)`)
		require.NoError(t, err)
		require.Equal(t, []string{evil + "|"}, got)
		got, err = postgres.PoolStrings(store.WithTenant(ctx, evil), app, `SELECT current_setting('app.tenant_id', true)`)
		require.NoError(t, err)
		require.Equal(t, []string{evil}, got)
	}
	// Nothing leaked into the session.
	got, err := postgres.TxStrings(ctx, app, `SELECT coalesce(current_setting('app.system', true), '')`)
	require.NoError(t, err)
	require.Equal(t, []string{""}, got)
}

// TestRLSBackgroundFailsClosed: background work that forgot its scope sees
// no tenant's rows and cannot write, rather than seeing all of them.
func TestRLSBackgroundFailsClosed(t *testing.T) {
	ctx := context.Background()
	r := testdb.PostgresRoles(t)
	a, _ := isolationFixture(t, r.App)
	sys := store.WithSystem(ctx, "test fixture")
	past := time.Now().Add(-time.Hour)
	require.NoError(t, r.App.AttemptCreate(sys, &store.Attempt{ID: "att_1", RunID: "run_" + a, Tenant: a, Number: 1,
		State: store.AttemptLeased, Pool: "default", LeaseTTL: time.Minute, Timeout: time.Hour, NotBefore: past,
		RunnerID: "rnr_1", LeaseDigest: "d", LeaseExpiresAt: &past, CreatedAt: past}))
	now := time.Now()

	expired, err := r.App.AttemptListExpired(ctx, &store.AttemptListExpiredParams{Now: &now})
	require.NoError(t, err)
	require.Empty(t, expired, "an unscoped reaper saw expired attempts")
	expired, err = r.App.AttemptListExpired(store.WithSystem(ctx, "reaper"), &store.AttemptListExpiredParams{Now: &now})
	require.NoError(t, err)
	require.Len(t, expired, 1)

	pending, err := r.App.RunListPendingApproval(ctx, now, 10)
	require.NoError(t, err)
	require.Empty(t, pending)
	_, err = r.App.TenantEnsure(ctx, "tenant-c", nil)
	require.Error(t, err, "an unscoped task created a tenant")
	err = r.App.InTx(ctx, func(tx store.Tx) error {
		return tx.AuditAppend(ctx, &store.AuditEvent{Tenant: a, Actor: "system", Action: "probe", Subject: "x"})
	})
	require.True(t, isRLSRefusal(err), "unscoped audit append: %v", err)
}

// TestRLSCheckerCatchesBrokenVariants: the checker fails for the two ways
// the backstop is commonly lost, so a green TestRLSIsolation means something.
func TestRLSCheckerCatchesBrokenVariants(t *testing.T) {
	ctx := context.Background()
	r := testdb.PostgresRoles(t)
	a, b := isolationFixture(t, r.App)

	t.Run("owner connection", func(t *testing.T) {
		owner := openStore(t, withPoolSize1(r.OwnerDSN))
		// FORCE binds the owner too: the owner's connection passes...
		require.NoError(t, checkIsolation(ctx, storeDB{s: owner}, a, b))
		// ...and without FORCE the owner bypasses every policy.
		conn, err := pgx.Connect(ctx, r.OwnerDSN)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `ALTER TABLE runs NO FORCE ROW LEVEL SECURITY; ALTER TABLE secrets NO FORCE ROW LEVEL SECURITY`)
		require.NoError(t, err)
		err = checkIsolation(ctx, storeDB{s: owner}, a, b)
		require.ErrorContains(t, err, "an unscoped query saw tenants")
		require.ErrorContains(t, err, "was not refused by row security")
		// The app role stays bound without FORCE: it is not the owner.
		require.NoError(t, checkIsolation(ctx, storeDB{s: openStore(t, withPoolSize1(r.AppDSN))}, a, b))
		_, err = conn.Exec(ctx, `ALTER TABLE runs FORCE ROW LEVEL SECURITY; ALTER TABLE secrets FORCE ROW LEVEL SECURITY`)
		require.NoError(t, err)
	})

	t.Run("superuser connection", func(t *testing.T) {
		super := openStore(t, withPoolSize1(r.SuperDSN))
		require.ErrorContains(t, checkIsolation(ctx, storeDB{s: super}, a, b), "an unscoped query saw tenants")
	})

	t.Run("session SET", func(t *testing.T) {
		cfg, err := pgxpool.ParseConfig(r.AppDSN)
		require.NoError(t, err)
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer pool.Close()
		err = checkIsolation(ctx, sessionDB{pool: pool}, a, b)
		require.ErrorContains(t, err, "the next one started with app.tenant_id")
		require.ErrorContains(t, err, "an unscoped query saw tenants")
	})
}

// BenchmarkScope measures what declaring a scope costs a small transaction
// and a single statement: the same point read by ID, with no scope as the
// superuser (what the store did before migration 012) and with a tenant
// scope as the app role, bound by the policies.
func BenchmarkScope(b *testing.B) {
	ctx := context.Background()
	r := testdb.PostgresRoles(b)
	a, _ := isolationFixture(b, r.App)
	super := openStoreB(b, r.SuperDSN)
	app := r.App.(*postgres.Store)
	for _, c := range []struct {
		name string
		s    *postgres.Store
		ctx  context.Context
	}{{"none-superuser", super, ctx}, {"tenant-superuser", super, store.WithTenant(ctx, a)}, {"tenant-app", app, store.WithTenant(ctx, a)}} {
		b.Run("InTx/"+c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.s.InTx(c.ctx, func(tx store.Tx) error {
					_, err := tx.RunGetByID(c.ctx, "run_"+a, false)
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Pool/"+c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.s.RunGetByID(c.ctx, "run_"+a, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func openStoreB(b *testing.B, dsn string) *postgres.Store {
	b.Helper()
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}
