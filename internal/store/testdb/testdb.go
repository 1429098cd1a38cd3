package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/sqlite"
)

const (
	envDSN        = "JOBPLANE_TEST_POSTGRES"
	envRequire    = "JOBPLANE_TEST_REQUIRE_POSTGRES"
	defaultDSN    = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	probeDeadline = time.Second
)

// SQLite returns a fresh SQLite store in the test's temp dir, closed at cleanup.
func SQLite(t testing.TB) store.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "jobplane.db"))
	if err != nil {
		t.Fatalf("testdb: open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Postgres returns a fresh PostgreSQL store in its own schema, dropped at cleanup.
func Postgres(t testing.TB) store.Store {
	t.Helper()
	dsn := PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("testdb: open postgres: %v", err)
	}
	// Registered after PostgresDSN's cleanup, so it runs before the schema drop.
	t.Cleanup(func() { _ = s.Close() })
	dsnOf.Store(s, dsn)
	t.Cleanup(func() { dsnOf.Delete(s) })
	return s
}

// PostgresDSN returns a DSN whose search_path is a fresh, empty schema that is
// dropped at cleanup; for tests that start a server process with --db.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return newSchema(t, "")
}

// newSchema creates a fresh schema, owned by owner when it is not "", and
// returns a DSN of the base role whose search_path is it.
func newSchema(t testing.TB, owner string) string {
	t.Helper()
	base := baseDSN(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "jp_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	defer conn.Close(context.Background())
	create := `CREATE SCHEMA ` + schema
	if owner != "" {
		if err := ensureRoles(ctx, conn); err != nil {
			t.Fatalf("testdb: roles: %v", err)
		}
		create += ` AUTHORIZATION ` + owner
	}
	if _, err := conn.Exec(ctx, create); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("testdb: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("testdb: drop schema %s: %v", schema, err)
		}
	})
	return withSearchPath(base, schema)
}

// Each runs fn against every store as subtests "sqlite" and "postgres".
func Each(t *testing.T, fn func(t *testing.T, s store.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, Postgres(t)) })
}

// withSearchPath adds search_path as a startup parameter, which pgx sends for
// unknown DSN keys, so every pooled connection starts in the schema.
func withSearchPath(dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err == nil {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return dsn + " search_path=" + schema
}

var probe struct {
	once sync.Once
	dsn  string
	err  error
}

// baseDSN finds the database once per test binary.
func baseDSN(t testing.TB) string {
	t.Helper()
	probe.once.Do(func() {
		probe.dsn = os.Getenv(envDSN)
		if probe.dsn == "" {
			probe.dsn = defaultDSN
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeDeadline)
		defer cancel()
		conn, err := pgx.Connect(ctx, probe.dsn)
		if err != nil {
			probe.err = err
			return
		}
		probe.err = conn.Ping(ctx)
		_ = conn.Close(context.Background())
	})
	if probe.err != nil {
		msg := "testdb: no PostgreSQL at " + redact(probe.dsn) + " (set " + envDSN + "): " + probe.err.Error()
		if os.Getenv(envRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return probe.dsn
}

func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxx")
			return u.String()
		}
	}
	return dsn
}
