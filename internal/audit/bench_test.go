package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// Figures in docs/benchmarks.md ("Audit chain"):
//
//	JOBPLANE_TEST_REQUIRE_POSTGRES=1 go test -run XXX -bench . -benchtime 20000x ./internal/audit/
func benchStores(b *testing.B, fn func(b *testing.B, st store.Store)) {
	b.Run("sqlite", func(b *testing.B) { fn(b, testdb.SQLite(b)) })
	b.Run("postgres", func(b *testing.B) { fn(b, testdb.Postgres(b)) })
}

func fill(b *testing.B, st store.Store, n int) {
	b.Helper()
	ctx := context.Background()
	details := json.RawMessage(`{"job":"backfill","channel":"prod","attempt":"att_01J0000000000000000000000","holder":{"registration":"rnr_01J","incarnation":"c1","lease":"0123456789abcdef"}}`)
	for i := 0; i < n; i += 500 {
		err := st.InTx(ctx, func(tx store.Tx) error {
			for j := i; j < min(i+500, n); j++ {
				if err := tx.AuditAppend(ctx, &store.AuditEvent{Tenant: "ten_01J", Actor: "runner:rnr_01J", Action: "attempt.succeeded",
					Subject: fmt.Sprintf("run_%d", j), Details: details}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppend: one event appended in its own transaction (what a
// mutation pays for its audit row, plus the transaction itself).
func BenchmarkAppend(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		ctx := context.Background()
		details := json.RawMessage(`{"attempt":"att_01J","state":"succeeded"}`)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := st.InTx(ctx, func(tx store.Tx) error {
				return tx.AuditAppend(ctx, &store.AuditEvent{Tenant: "t", Actor: "a", Action: "x", Subject: "s", Details: details})
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSeal: linking b.N committed events (per event).
func BenchmarkSeal(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		fill(b, st, b.N)
		s := audit.NewSealer(st, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		b.ResetTimer()
		n, err := s.SealAll(ctx)
		if err != nil || n != b.N {
			b.Fatalf("sealed %d of %d: %v", n, b.N, err)
		}
	})
}

// BenchmarkVerify: recomputing the chain over b.N events (per event).
func BenchmarkVerify(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		fill(b, st, b.N)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := audit.NewSealer(st, nil).SealAll(ctx); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		rep, err := audit.Verify(ctx, st, nil)
		if err != nil || !rep.OK || rep.Sealed != int64(b.N) {
			b.Fatalf("verify: %+v %v", rep, err)
		}
	})
}

// BenchmarkAppendStatementPostgres compares, inside one transaction, the
// audit INSERT before this chain existed with the one that records the
// transaction ID first (the horizon's requirement): the statement's own cost.
func BenchmarkAppendStatementPostgres(b *testing.B) {
	for name, q := range map[string]string{
		"plain": `INSERT INTO audit_events (tenant, at, actor, action, subject, details)
			VALUES ('t', clock_timestamp(), 'a', 'x', 's', '{"k":1}') RETURNING seq, at`,
		"with_xid": `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid)
			INSERT INTO audit_events (xid, tenant, at, actor, action, subject, details)
			SELECT x.xid, 't', clock_timestamp(), 'a', 'x', 's', '{"k":1}' FROM x RETURNING seq, at`,
	} {
		b.Run(name, func(b *testing.B) {
			dsn := testdb.PostgresDSN(b)
			ctx := context.Background()
			st, err := postgres.Open(ctx, dsn) // migrates the schema
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			tx, err := conn.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var seq int64
			var at time.Time
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := tx.QueryRow(ctx, q).Scan(&seq, &at); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLink: the hash link of one event as the sealer computes it for
// every event (the canonical encoding and SHA-256), with details as a
// run's end writes them, in PostgreSQL's jsonb spelling.
//
//	go test -run XXX -bench Link -benchmem ./internal/audit/
func BenchmarkLink(b *testing.B) {
	e := &store.AuditEvent{Seq: 123456, Tenant: "tnt_01M8TDS0PPHKTKWJQ6985B91JW", At: time.Date(2026, 12, 2, 4, 0, 0, 123456000, time.UTC),
		Actor: "runner:rnr_01M8TDS0PPHKTKWJQ6985B91JX", Action: "attempt.succeeded", Subject: "run_01M8TDS0PPHKTKWJQ6985B91JY",
		Details: json.RawMessage(`{"state": "succeeded", "holder": {"lease": "0123456789abcdef", "incarnation": "c1", "registration": "rnr_01M8TDS0PPHKTKWJQ6985B91JX"}, "number": 1, "reason": "done", "attempt": "att_01M8TDS0PPHKTKWJQ6985B91JZ"}`)}
	b.ReportAllocs()
	for b.Loop() {
		_ = audit.Link(audit.Genesis, e)
	}
}
