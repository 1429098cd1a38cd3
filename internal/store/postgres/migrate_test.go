package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestRecordsAsJSONKeepTheChain: migration 015 turns runs.decision,
// runs.spec and audit_events.details from jsonb into json. Events written
// and sealed before it, in jsonb's spelling (keys reordered, spaces added),
// still verify after it, and events written after it join the same chain.
func TestRecordsAsJSONKeepTheChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testdb.PostgresDSN(t)
	open := func() *postgres.Store {
		s, err := postgres.Open(ctx, dsn)
		require.NoError(t, err)
		return s
	}
	columnTypes := func(conn *pgx.Conn) map[string]string {
		rows, err := conn.Query(ctx, `SELECT table_name || '.' || column_name, data_type FROM information_schema.columns
			WHERE table_schema = current_schema() AND (table_name, column_name) IN
				(('runs', 'decision'), ('runs', 'spec'), ('audit_events', 'details'))`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
			var kv [2]string
			return kv, r.Scan(&kv[0], &kv[1])
		})
		require.NoError(t, err)
		m := map[string]string{}
		for _, kv := range got {
			m[kv[0]] = kv[1]
		}
		return m
	}

	// A schema as it stood before 015.
	s := open()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Equal(t, map[string]string{"runs.decision": "json", "runs.spec": "json", "audit_events.details": "json"}, columnTypes(conn))
	_, err = conn.Exec(ctx, `ALTER TABLE runs ALTER COLUMN decision TYPE jsonb USING decision::jsonb,
			ALTER COLUMN spec TYPE jsonb USING spec::jsonb;
		ALTER TABLE audit_events ALTER COLUMN details TYPE jsonb USING details::jsonb;
		DELETE FROM schema_migrations WHERE version = 15`)
	require.NoError(t, err)

	// Details that jsonb spells differently from how they were written.
	written := []string{
		`{"zeta":1,"a":"x","nested":{"bb":[1,2.50,{"y":null,"x":true}],"a":"\u00e9\u003c"}}`,
		`{"attempt":"att_1","holder":{"registration":"rnr_1","incarnation":"c1"},"number":1}`,
		`[3,"two",{"one":1}]`,
	}
	appendEvents := func(st store.Store, details []string) {
		require.NoError(t, st.InTx(ctx, func(tx store.Tx) error {
			for _, d := range details {
				if err := tx.AuditAppend(ctx, &store.AuditEvent{Tenant: "ten_1", Actor: "user:alice", Action: "test.migrated",
					Subject: "run_1", Details: json.RawMessage(d)}); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	appendEvents(s, written)
	sealed, err := audit.NewSealer(s, nil).SealAll(ctx)
	require.NoError(t, err)
	require.Equal(t, len(written), sealed)
	var spelled string
	require.NoError(t, conn.QueryRow(ctx, `SELECT details::text FROM audit_events ORDER BY seq LIMIT 1`).Scan(&spelled))
	require.NotEqual(t, written[0], spelled, "jsonb kept the spelling: the test would not show the encoding is independent of it")
	before, err := audit.Verify(ctx, s, nil)
	require.NoError(t, err)
	require.True(t, before.OK, "%+v", before.Broken)
	require.NoError(t, s.Close())

	// The server starts on it: 015 runs.
	s = open()
	defer s.Close()
	require.Equal(t, map[string]string{"runs.decision": "json", "runs.spec": "json", "audit_events.details": "json"}, columnTypes(conn))
	var kept string
	require.NoError(t, conn.QueryRow(ctx, `SELECT details::text FROM audit_events ORDER BY seq LIMIT 1`).Scan(&kept))
	require.Equal(t, spelled, kept, "the migration changed a stored value")

	appendEvents(s, written[:1])
	sealed, err = audit.NewSealer(s, nil).SealAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sealed)
	require.NoError(t, conn.QueryRow(ctx, `SELECT details::text FROM audit_events ORDER BY seq DESC LIMIT 1`).Scan(&kept))
	require.Equal(t, written[0], kept, "json keeps the text as written")
	after, err := audit.Verify(ctx, s, nil)
	require.NoError(t, err)
	require.True(t, after.OK, "%+v", after.Broken)
	require.Equal(t, int64(len(written)+1), after.Sealed)
	// The checkpoint taken before the migration still holds.
	withCP, err := audit.Verify(ctx, s, &before.Head)
	require.NoError(t, err)
	require.True(t, withCP.OK, "%+v", withCP.Broken)
}
