package broker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/redact"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// ---- fixtures ----

type fixture struct {
	s      store.Store
	box    *creds.Box
	b      *Broker
	tenant string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := testdb.SQLite(t)
	key := make([]byte, creds.ServerKeySize)
	_, _ = rand.Read(key)
	box, err := creds.NewBox(key)
	require.NoError(t, err)
	tn, err := s.TenantEnsure(context.Background(), "acme", nil)
	require.NoError(t, err)
	return &fixture{s: s, box: box, b: NewBroker(s, box), tenant: tn.ID}
}

func (f *fixture) putSecret(t *testing.T, name, channel, value string) {
	t.Helper()
	require.NoError(t, f.s.SecretPut(context.Background(), &store.Secret{
		Tenant: f.tenant, Name: name, Channel: channel, UpdatedAt: time.Now(),
		Ciphertext: f.box.Seal([]byte(value), creds.SecretAD(f.tenant, name, channel)),
	}))
}

// leasedAttempt creates a run and claims its attempt at now with a lease of
// leaseTTL; it returns the attempt as claimed.
func (f *fixture) leasedAttempt(t *testing.T, now time.Time, leaseTTL time.Duration) *store.Attempt {
	t.Helper()
	ctx := context.Background()
	r := &store.Run{
		ID: id.New(id.Run, now), Tenant: f.tenant, Job: "report", Channel: "prod", Ref: "main", Commit: "abc",
		Params: json.RawMessage(`{}`), Actor: "alice", Source: json.RawMessage(`{"kind":"api"}`),
		State: store.RunQueued, MaxAttempts: 1, CreatedAt: now, UpdatedAt: now,
	}
	require.NoError(t, f.s.RunCreate(ctx, r))
	pool := "pool-" + strings.ToLower(r.ID[len(r.ID)-8:])
	a := &store.Attempt{
		ID: id.New(id.Attempt, now), RunID: r.ID, Tenant: f.tenant, Number: 1, State: store.AttemptQueued,
		Pool: pool, LeaseTTL: leaseTTL, Timeout: time.Hour, NotBefore: now.Add(-time.Minute), CreatedAt: now,
	}
	require.NoError(t, f.s.AttemptCreate(ctx, a))
	got, err := f.s.AttemptClaim(ctx, &store.AttemptClaimParams{
		Tenant: f.tenant, Pool: pool, RunnerID: "rnr_1", LeaseDigest: "d", ClaimRequestID: "req-" + a.ID, Now: &now,
	})
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	return got
}

func (f *fixture) endAttempt(t *testing.T, a *store.Attempt, at time.Time) {
	t.Helper()
	a.State = store.AttemptSucceeded
	a.EndedAt = &at
	require.NoError(t, f.s.AttemptUpdate(context.Background(), a))
}

func requireNoSecret(t *testing.T, err error, values ...string) {
	t.Helper()
	require.Error(t, err)
	for _, v := range values {
		require.NotContains(t, err.Error(), v)
	}
}

// ---- static ----

// billingYAML is a static connector with aliased bindings (the same as
// package connector's parser tests use).
const billingYAML = `name: billing-api
type: static
bindings:
  prod:    {read: {TOKEN: billing-readonly-token}, write: {TOKEN: billing-admin-token, URL: billing-url}}
  staging: &s
    read: {TOKEN: billing-staging-token}
  dev: *s
`

func TestStatic(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	def, errs := connector.Parse("connectors/billing-api.yaml", []byte(billingYAML))
	require.Empty(t, errs)
	f.putSecret(t, "billing-readonly-token", "prod", "ro-token-value")
	f.putSecret(t, "billing-admin-token", "", "admin-token-value") // all channels
	f.putSecret(t, "billing-url", "prod", "https://billing.example/api")
	f.putSecret(t, "billing-admin-token", "staging", "not-this-one") // another channel

	req := Request{Tenant: f.tenant, RunID: "run_1", AttemptID: "att_1", Channel: "prod",
		Deadline: time.Now().Add(time.Hour), Connectors: map[string]Use{"billing-api": {Def: def, Level: connector.LevelRead}}}
	got, err := f.b.Issue(ctx, req)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"JOBPLANE_CONNECTOR_BILLING_API_TOKEN": "ro-token-value"}, got.Env)
	require.Equal(t, []string{"ro-token-value"}, got.Secrets)

	req.Connectors["billing-api"] = Use{Def: def, Level: connector.LevelWrite}
	got, err = f.b.Issue(ctx, req)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"JOBPLANE_CONNECTOR_BILLING_API_TOKEN": "admin-token-value", // fell back to the all-channels value
		"JOBPLANE_CONNECTOR_BILLING_API_URL":   "https://billing.example/api",
	}, got.Env)
	m := redact.NewMasker(got.Secrets...)
	require.Equal(t, "token=*** url=***", m.Mask("token=admin-token-value url=https://billing.example/api"))

	// A missing secret names the secret and channel, never any value.
	req.Channel = "staging"
	req.Connectors["billing-api"] = Use{Def: def, Level: connector.LevelRead}
	_, err = f.b.Issue(ctx, req)
	requireNoSecret(t, err, "ro-token-value", "admin-token-value", "not-this-one")
	require.Contains(t, err.Error(), `secret "billing-staging-token" is not set for channel staging`)

	// No binding for the channel.
	req.Channel = "qa"
	_, err = f.b.Issue(ctx, req)
	requireNoSecret(t, err, "ro-token-value", "admin-token-value")
	require.Contains(t, err.Error(), `connector "billing-api" has no binding for channel qa`)

	// A ciphertext moved to another name does not open.
	sec, err := f.s.SecretGet(ctx, f.tenant, "billing-url", "prod")
	require.NoError(t, err)
	require.NoError(t, f.s.SecretPut(ctx, &store.Secret{Tenant: f.tenant, Name: "billing-admin-token", Channel: "prod", Ciphertext: sec.Ciphertext, UpdatedAt: time.Now()}))
	req.Channel = "prod"
	req.Connectors["billing-api"] = Use{Def: def, Level: connector.LevelWrite}
	_, err = f.b.Issue(ctx, req)
	requireNoSecret(t, err, "https://billing.example/api")
	require.ErrorIs(t, err, creds.ErrSealedInvalid)
}

func TestEnvName(t *testing.T) {
	require.Equal(t, "JOBPLANE_CONNECTOR_BILLING_API_TOKEN", connector.EnvName("billing-api", "TOKEN"))
}

func TestRoleName(t *testing.T) {
	require.Equal(t, "jp_att_01abc_warehouse", RoleName("att_01ABC", "warehouse"))
	long := RoleName("att_01ABC", strings.Repeat("x", 63))
	require.Len(t, long, 63)
	require.Regexp(t, `^[a-z_][a-z0-9_]{0,62}$`, long)
	require.NotEqual(t, long, RoleName("att_01ABC", strings.Repeat("x", 62)+"y"))
}

// ---- DSN and SCRAM ----

func TestJobDSN(t *testing.T) {
	got, err := jobDSN("postgres://admin:s3cr%40t@db.example:6432/wh?sslmode=verify-full&application_name=x&password=other", "jp_a", "pw-_A1")
	require.NoError(t, err)
	u, err := url.Parse(got)
	require.NoError(t, err)
	require.Equal(t, "db.example:6432", u.Host)
	require.Equal(t, "/wh", u.Path)
	require.Equal(t, "verify-full", u.Query().Get("sslmode"))
	require.Equal(t, "x", u.Query().Get("application_name"))
	require.NotContains(t, got, "s3cr")
	require.NotContains(t, got, "other")
	cfg, err := pgx.ParseConfig(got)
	require.NoError(t, err)
	require.Equal(t, "jp_a", cfg.User)
	require.Equal(t, "pw-_A1", cfg.Password)

	got, err = jobDSN(`host=db.example port=6432 dbname='my wh' user=admin password='it\'s secret' sslmode=require`, "jp_a", "pw")
	require.NoError(t, err)
	require.NotContains(t, got, "secret")
	cfg, err = pgx.ParseConfig(got)
	require.NoError(t, err)
	require.Equal(t, "db.example", cfg.Host)
	require.EqualValues(t, 6432, cfg.Port)
	require.Equal(t, "my wh", cfg.Database)
	require.Equal(t, "jp_a", cfg.User)
	require.Equal(t, "pw", cfg.Password)
	require.NotNil(t, cfg.TLSConfig, "sslmode kept")

	_, err = jobDSN("host='unterminated password=hunter2", "jp_a", "pw")
	requireNoSecret(t, err, "hunter2")
}

// TestSCRAMVectorRFC7677 checks the key derivation against the exchange in
// RFC 7677 section 3: a verifier built from these keys is what a server uses
// to check that exchange.
func TestSCRAMVectorRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	storedKey, serverKey := scramKeys("pencil", salt, 4096)
	authMessage := "n=user,r=rOprNGfwEbeRWgbNEkqO," +
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096," +
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	// The server verifies: StoredKey == H(ClientProof XOR HMAC(StoredKey, AuthMessage)).
	proof, _ := base64.StdEncoding.DecodeString("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
	sig := hmac.New(sha256.New, storedKey)
	sig.Write([]byte(authMessage))
	clientKey := sig.Sum(nil)
	for i := range clientKey {
		clientKey[i] ^= proof[i]
	}
	h := sha256.Sum256(clientKey)
	require.Equal(t, hex.EncodeToString(storedKey), hex.EncodeToString(h[:]))
	ss := hmac.New(sha256.New, serverKey)
	ss.Write([]byte(authMessage))
	require.Equal(t, "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", base64.StdEncoding.EncodeToString(ss.Sum(nil)))
	v := scramVerifierWith("pencil", salt, 4096)
	require.Regexp(t, `^SCRAM-SHA-256\$4096:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$`, v)
}

// ---- PostgreSQL ----

var pgProbe struct {
	once sync.Once
	dsn  string
	err  error
}

// superDSN returns the superuser DSN of the test cluster, skipping (or, with
// JOBPLANE_TEST_REQUIRE_POSTGRES=1, failing) like package testdb does.
func superDSN(t *testing.T) string {
	t.Helper()
	pgProbe.once.Do(func() {
		pgProbe.dsn = os.Getenv("JOBPLANE_TEST_POSTGRES")
		if pgProbe.dsn == "" {
			pgProbe.dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgProbe.dsn)
		if err != nil {
			pgProbe.err = err
			return
		}
		pgProbe.err = conn.Ping(ctx)
		_ = conn.Close(context.Background())
	})
	if pgProbe.err != nil {
		msg := "no PostgreSQL for connector tests (set JOBPLANE_TEST_POSTGRES): " + pgProbe.err.Error()
		if os.Getenv("JOBPLANE_TEST_REQUIRE_POSTGRES") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return pgProbe.dsn
}

type scratch struct {
	adminDSN   string // superuser DSN of the scratch database
	readRole   string
	writeRole  string
	definition *connector.Definition
}

func withDatabase(dsn, db string) string {
	cfg, _ := pgx.ParseConfig(dsn)
	u := &url.URL{Scheme: "postgres", User: url.User(cfg.User), Host: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), Path: "/" + db, RawQuery: "sslmode=disable"}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	return u.String()
}

// scratchTimeout bounds the scratch database's setup and its cleanup.
const scratchTimeout = 2 * time.Minute

// newScratch creates a database with a table, a read role (SELECT) and a
// write role (SELECT, INSERT), all dropped at cleanup with any login role
// a test left behind.
func newScratch(t *testing.T) *scratch {
	t.Helper()
	super := superDSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	sfx := hex.EncodeToString(b[:])
	s := &scratch{readRole: "warehouse_read_" + sfx, writeRole: "warehouse_write_" + sfx}
	db := "jp_conn_" + sfx
	// CREATE and DROP DATABASE write and sync a whole database: on a
	// loaded two-core machine that has taken longer than 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), scratchTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, super)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for _, q := range []string{
		"CREATE DATABASE " + db,
		"CREATE ROLE " + s.readRole + " NOLOGIN",
		"CREATE ROLE " + s.writeRole + " NOLOGIN",
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), scratchTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, super)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		rows, _ := conn.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname IN ($1, $2) OR (rolname LIKE 'jp\_att\_%' AND pg_has_role(rolname, $1, 'MEMBER')) OR (rolname LIKE 'jp\_att\_%' AND pg_has_role(rolname, $2, 'MEMBER'))`, s.readRole, s.writeRole)
		roles, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		// Login roles first: they are members of the test roles.
		for i := len(roles) - 1; i >= 0; i-- {
			if strings.HasPrefix(roles[i], "jp_") {
				_, _ = conn.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{roles[i]}.Sanitize())
			}
		}
		for _, r := range []string{s.readRole, s.writeRole} {
			if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+r); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	s.adminDSN = withDatabase(super, db)
	dbc, err := pgx.Connect(ctx, s.adminDSN)
	require.NoError(t, err)
	defer dbc.Close(context.Background())
	for _, q := range []string{
		"CREATE TABLE facts (id int PRIMARY KEY, v text)",
		"INSERT INTO facts VALUES (1, 'one')",
		"GRANT SELECT ON facts TO " + s.readRole,
		"GRANT SELECT, INSERT ON facts TO " + s.writeRole,
	} {
		_, err := dbc.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	def, errs := connector.Parse("connectors/warehouse.yaml", []byte(
		"name: warehouse\ntype: postgres\nbindings:\n  prod: {secret: warehouse-prod-admin-dsn, read_role: "+s.readRole+", write_role: "+s.writeRole+"}\n"))
	require.Empty(t, errs)
	s.definition = def
	return s
}

func connectJob(ctx context.Context, dsn string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, dsn)
}

func roleExists(t *testing.T, super, role string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, super)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = $1`, role).Scan(&n))
	return n == 1
}

func TestPostgresReadWriteRevoke(t *testing.T) {
	ctx := context.Background()
	sc := newScratch(t)
	f := newFixture(t)
	f.putSecret(t, "warehouse-prod-admin-dsn", "prod", sc.adminDSN)
	now := time.Now()
	deadline := now.Add(time.Hour).Truncate(time.Microsecond)

	issue := func(a *store.Attempt, level string) *Issued {
		t.Helper()
		got, err := f.b.Issue(ctx, Request{Tenant: f.tenant, RunID: a.RunID, AttemptID: a.ID, Channel: "prod", Deadline: deadline,
			Connectors: map[string]Use{"warehouse": {Def: sc.definition, Level: level}}})
		require.NoError(t, err)
		require.Len(t, got.Env, 1)
		require.Contains(t, got.Env, "JOBPLANE_CONNECTOR_WAREHOUSE_DSN")
		return got
	}

	// Read: SELECT works, INSERT is refused.
	ra := f.leasedAttempt(t, now, time.Minute)
	read := issue(ra, connector.LevelRead)
	readDSN := read.Env["JOBPLANE_CONNECTOR_WAREHOUSE_DSN"]
	readRole := RoleName(ra.ID, "warehouse")
	cfg, err := pgx.ParseConfig(readDSN)
	require.NoError(t, err)
	require.Equal(t, readRole, cfg.User)
	require.Len(t, cfg.Password, 43)
	require.Equal(t, "127.0.0.1", cfg.Host)
	require.Equal(t, "jp_conn_", cfg.Database[:8])
	require.Contains(t, read.Secrets, cfg.Password)
	m := redact.NewMasker(read.Secrets...)
	require.NotContains(t, m.Mask("dsn="+readDSN+" pw="+cfg.Password), cfg.Password)

	rc, err := connectJob(ctx, readDSN)
	require.NoError(t, err)
	var v string
	require.NoError(t, rc.QueryRow(ctx, "SELECT v FROM facts WHERE id = 1").Scan(&v))
	require.Equal(t, "one", v)
	_, err = rc.Exec(ctx, "INSERT INTO facts VALUES (2, 'two')")
	require.ErrorContains(t, err, "permission denied")

	// The role expires at the deadline, and PostgreSQL stored the SCRAM
	// verifier we sent (it would have hashed anything it did not recognise).
	super := superDSN(t)
	sconn, err := pgx.Connect(ctx, super)
	require.NoError(t, err)
	defer sconn.Close(ctx)
	var validUntil time.Time
	var stored string
	require.NoError(t, sconn.QueryRow(ctx, `SELECT rolvaliduntil, rolpassword FROM pg_authid WHERE rolname = $1`, readRole).Scan(&validUntil, &stored))
	require.True(t, deadline.Equal(validUntil), "valid until %v, deadline %v", validUntil, deadline)
	require.True(t, strings.HasPrefix(stored, "SCRAM-SHA-256$4096:"))
	var inRead, inWrite bool
	require.NoError(t, sconn.QueryRow(ctx, `SELECT pg_has_role($1, $2, 'MEMBER'), pg_has_role($1, $3, 'MEMBER')`, readRole, sc.readRole, sc.writeRole).Scan(&inRead, &inWrite))
	require.True(t, inRead)
	require.False(t, inWrite)

	// Write: INSERT works.
	wa := f.leasedAttempt(t, now, time.Minute)
	write := issue(wa, connector.LevelWrite)
	wc, err := connectJob(ctx, write.Env["JOBPLANE_CONNECTOR_WAREHOUSE_DSN"])
	require.NoError(t, err)
	defer wc.Close(ctx)
	_, err = wc.Exec(ctx, "INSERT INTO facts VALUES (3, 'three')")
	require.NoError(t, err)

	// Issuing again for the same attempt rotates the password and keeps one role.
	again := issue(ra, connector.LevelRead)
	require.NotEqual(t, readDSN, again.Env["JOBPLANE_CONNECTOR_WAREHOUSE_DSN"])
	var stored2 string
	require.NoError(t, sconn.QueryRow(ctx, `SELECT rolpassword FROM pg_authid WHERE rolname = $1`, readRole).Scan(&stored2))
	require.NotEqual(t, stored, stored2)

	// While both attempts are live, nothing is revoked.
	n, err := f.b.Revoke(ctx, &now, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	require.True(t, roleExists(t, super, readRole))

	// The read attempt ends: its role is dropped, its open session is
	// terminated, and its DSN no longer connects.
	f.endAttempt(t, ra, now.Add(time.Second))
	n, err = f.b.Revoke(ctx, nil, 100)
	require.NoError(t, err)
	require.Equal(t, 2, n, "both records of the twice-issued role")
	require.False(t, roleExists(t, super, readRole))
	require.True(t, roleExists(t, super, RoleName(wa.ID, "warehouse")), "the live attempt keeps its role")
	_, err = rc.Exec(ctx, "SELECT 1")
	require.Error(t, err, "the session of a revoked role is terminated")
	rc.Close(ctx)
	_, err = connectJob(ctx, readDSN)
	require.Error(t, err)
	requireNoSecret(t, err, cfg.Password)

	// Revoking again finds nothing to do.
	n, err = f.b.Revoke(ctx, nil, 100)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestPostgresKilledWorker: the worker dies, nobody ends the attempt; once
// its lease has run out the reaper's Revoke drops the role.
func TestPostgresKilledWorker(t *testing.T) {
	ctx := context.Background()
	sc := newScratch(t)
	f := newFixture(t)
	f.putSecret(t, "warehouse-prod-admin-dsn", "", sc.adminDSN) // all-channels secret
	now := time.Now()
	a := f.leasedAttempt(t, now, 30*time.Second)
	got, err := f.b.Issue(ctx, Request{Tenant: f.tenant, RunID: a.RunID, AttemptID: a.ID, Channel: "prod", Deadline: now.Add(time.Hour),
		Connectors: map[string]Use{"warehouse": {Def: sc.definition, Level: connector.LevelWrite}}})
	require.NoError(t, err)
	role := RoleName(a.ID, "warehouse")
	super := superDSN(t)
	require.True(t, roleExists(t, super, role))
	jc, err := connectJob(ctx, got.Env["JOBPLANE_CONNECTOR_WAREHOUSE_DSN"])
	require.NoError(t, err)
	defer jc.Close(ctx)
	// The job leaves an object behind; REASSIGN/DROP OWNED must cope.
	_, err = jc.Exec(ctx, "CREATE TEMP TABLE scratch (x int)")
	require.NoError(t, err)

	before := now.Add(10 * time.Second)
	n, err := f.b.Revoke(ctx, &before, 10)
	require.NoError(t, err)
	require.Zero(t, n, "lease still valid")
	require.True(t, roleExists(t, super, role))

	after := now.Add(31 * time.Second)
	n, err = f.b.Revoke(ctx, &after, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.False(t, roleExists(t, super, role))
}

func TestPostgresErrorsHideSecrets(t *testing.T) {
	ctx := context.Background()
	sc := newScratch(t)
	f := newFixture(t)
	now := time.Now()
	a := f.leasedAttempt(t, now, time.Minute)
	req := Request{Tenant: f.tenant, RunID: a.RunID, AttemptID: a.ID, Channel: "prod", Deadline: now.Add(time.Hour),
		Connectors: map[string]Use{"warehouse": {Def: sc.definition, Level: connector.LevelRead}}}

	// Missing admin DSN.
	_, err := f.b.Issue(ctx, req)
	require.ErrorContains(t, err, `secret "warehouse-prod-admin-dsn" is not set for channel prod`)

	// Unreachable server with a password in the DSN.
	f.putSecret(t, "warehouse-prod-admin-dsn", "prod", "postgres://admin:hunter2-very-secret@127.0.0.1:1/x?sslmode=disable&connect_timeout=1")
	_, err = f.b.Issue(ctx, req)
	requireNoSecret(t, err, "hunter2-very-secret")

	// Garbage DSN.
	f.putSecret(t, "warehouse-prod-admin-dsn", "prod", "host='x password=hunter2-very-secret")
	_, err = f.b.Issue(ctx, req)
	requireNoSecret(t, err, "hunter2-very-secret")

	// A write grant with no write role.
	def, errs := connector.Parse("connectors/warehouse.yaml", []byte("name: warehouse\ntype: postgres\nbindings:\n  prod: {secret: warehouse-prod-admin-dsn, read_role: "+sc.readRole+"}\n"))
	require.Empty(t, errs)
	req.Connectors["warehouse"] = Use{Def: def, Level: connector.LevelWrite}
	_, err = f.b.Issue(ctx, req)
	require.ErrorContains(t, err, "no write_role for channel prod")

	// The revoke of an unreachable database fails for that credential only.
	n, err := f.b.Revoke(ctx, &[]time.Time{now.Add(time.Hour)}[0], 10)
	requireNoSecret(t, err, "hunter2-very-secret")
	require.Zero(t, n)
}
