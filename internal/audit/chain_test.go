package audit_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/sqlite"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// backend is a store plus a raw connection that can do what the server
// cannot: a PostgreSQL superuser with triggers off, or the owner of the
// SQLite file who dropped the triggers.
type backend struct {
	name string
	st   store.Store
	raw  func(t *testing.T, sql string)
	// gap makes the next event's sequence number skip one, as a rolled-back
	// transaction does on PostgreSQL.
	gap func(t *testing.T)
}

func backends(t *testing.T, fn func(t *testing.T, b *backend)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "jobplane.db")
		st, err := sqlite.Open(context.Background(), path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		dropped := false
		b := &backend{name: "sqlite", st: st}
		b.raw = func(t *testing.T, q string) {
			t.Helper()
			if !dropped {
				for _, tr := range []string{"audit_events_no_update", "audit_events_no_delete", "audit_chain_no_update", "audit_chain_no_delete"} {
					_, err := db.Exec(`DROP TRIGGER ` + tr)
					require.NoError(t, err)
				}
				dropped = true
			}
			_, err := db.Exec(q)
			require.NoError(t, err, q)
		}
		b.gap = func(t *testing.T) {
			t.Helper()
			_, err := db.Exec(`UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'audit_events'`)
			require.NoError(t, err)
		}
		fn(t, b)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := testdb.PostgresDSN(t)
		st, err := postgres.Open(context.Background(), dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		conn, err := pgx.Connect(context.Background(), dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		// A superuser session with triggers off: what AU4 calls a superuser edit.
		_, err = conn.Exec(context.Background(), `SET session_replication_role = replica`)
		require.NoError(t, err)
		b := &backend{name: "postgres", st: st}
		b.raw = func(t *testing.T, q string) {
			t.Helper()
			_, err := conn.Exec(context.Background(), q)
			require.NoError(t, err, q)
		}
		b.gap = func(t *testing.T) {
			t.Helper()
			err := st.InTx(context.Background(), func(tx store.Tx) error {
				if err := tx.AuditAppend(context.Background(), &store.AuditEvent{Tenant: "t", Actor: "a", Action: "rolled.back", Subject: "s"}); err != nil {
					return err
				}
				// The event is written (its number drawn) before the
				// rollback: see flushNow.
				if err := flushNow(tx); err != nil {
					return err
				}
				return errRollback
			})
			require.ErrorIs(t, err, errRollback)
		}
		fn(t, b)
	})
}

var errRollback = errors.New("roll back")

func appendEvent(t *testing.T, st store.Store, e *store.AuditEvent) {
	t.Helper()
	// In the event's tenant, as the server would (row-level security, MT3).
	ctx := store.WithTenant(context.Background(), e.Tenant)
	require.NoError(t, st.InTx(ctx, func(tx store.Tx) error { return tx.AuditAppend(ctx, e) }))
}

func sealAll(t *testing.T, s *audit.Sealer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.SealAll(ctx)
	require.NoError(t, err)
}

func verify(t *testing.T, st store.Store, cp *audit.Checkpoint) *audit.Report {
	t.Helper()
	rep, err := audit.Verify(context.Background(), st, cp)
	require.NoError(t, err)
	return rep
}

// TestAU2RoundTrip: 10,000 events with nanosecond times and Unicode
// payloads, written, sealed, read back and verified; the hash covers what
// the store keeps, not what the writer passed.
func TestAU2RoundTrip(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		const n = 10000
		base := time.Date(2026, 3, 29, 1, 59, 59, 999999999, time.FixedZone("x", 3600+1800))
		texts := []string{"héllo wörld", "日本語のテキスト", "emoji 🎉🚀", "rtl עברית", "nul\u0001ctl\ttab\nnewline", "quote \" back \\ slash", "\u2028\u2029", "<script>&amp;</script>"}
		for i := 0; i < n; i += 500 {
			require.NoError(t, b.st.InTx(ctx, func(tx store.Tx) error {
				for j := i; j < i+500; j++ {
					txt := texts[j%len(texts)]
					details, _ := json.Marshal(map[string]any{"text": txt, "n": j, "f": 1.5e-7 * float64(j), "nested": map[string]any{"z": []any{txt, nil, true}, "a": j}})
					if err := tx.AuditAppend(ctx, &store.AuditEvent{
						Tenant: "ten_" + string([]rune(txt)[:1]), At: base.Add(time.Duration(j) * 1234567 * time.Nanosecond),
						Actor: "actor " + txt, Action: "test.event", Subject: fmt.Sprintf("run_%d", j), Details: details,
					}); err != nil {
						return err
					}
				}
				return nil
			}))
		}
		s := audit.NewSealer(b.st, nil)
		sealAll(t, s)
		rep := verify(t, b.st, nil)
		require.True(t, rep.OK, "%+v", rep.Broken)
		require.EqualValues(t, n, rep.Sealed)
		require.Zero(t, rep.Unsealed)
		require.Equal(t, s.Head().Hash, rep.Head.Hash)

		// Re-derive every link from the rows as read back.
		evs, err := b.st.AuditScan(ctx, &store.AuditScanParams{Limit: n})
		require.NoError(t, err)
		require.Len(t, evs, n)
		prev := audit.Genesis
		for _, e := range evs {
			require.Equal(t, prev, e.PrevHash, "seq %d", e.Seq)
			require.Equal(t, audit.Link(prev, e), e.Hash, "seq %d", e.Seq)
			require.Zero(t, e.At.Nanosecond()%1000, "stored times have microsecond precision")
			prev = e.Hash
		}
		// Sealing again is a no-op.
		got, err := s.SealAll(ctx)
		require.NoError(t, err)
		require.Zero(t, got)
	})
}

// TestAU3ConcurrentWriters: 32 writers on two control-plane nodes (two
// stores, two sealers running all along) leave one chain, in sequence
// order, that verifies and covers every event.
func TestAU3ConcurrentWriters(t *testing.T) {
	t.Parallel()
	dsn := testdb.PostgresDSN(t)
	ctx := context.Background()
	var nodes []store.Store
	for range 2 {
		// 17 connections per node: every one of its 16 writers and its
		// sealer can be in a transaction at once, and no more.
		st, err := postgres.Open(ctx, dsn+poolSuffix(dsn, 17))
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		nodes = append(nodes, st)
	}
	stop := make(chan struct{})
	var sealers sync.WaitGroup
	var sealErrs [2]error
	for i, st := range nodes {
		s := audit.NewSealer(st, nil)
		sealers.Add(1)
		go func() {
			defer sealers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Seal(ctx); err != nil && sealErrs[i] == nil {
					sealErrs[i] = err
				}
			}
		}()
	}
	const writers, each = 32, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := nodes[w%2]
			for i := range each {
				err := st.InTx(ctx, func(tx store.Tx) error {
					if err := tx.AuditAppend(ctx, &store.AuditEvent{Tenant: "t", Actor: fmt.Sprintf("w%d", w), Action: "test.write", Subject: fmt.Sprint(i)}); err != nil {
						return err
					}
					if i%2 == 0 {
						if err := flushNow(tx); err != nil {
							return err
						}
					}
					// Hold some transactions open so that numbers commit out of order.
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					if i%7 == 3 {
						return errRollback
					}
					return nil
				})
				if err != nil && !errors.Is(err, errRollback) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	sealers.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, sealErrs[0])
	require.NoError(t, sealErrs[1])
	sealAll(t, audit.NewSealer(nodes[1], nil))
	rep := verify(t, nodes[0], nil)
	if !rep.OK {
		evs, _ := nodes[0].AuditScan(ctx, &store.AuditScanParams{Limit: 20})
		for _, e := range evs {
			t.Logf("seq %d actor %s at %s hash %.8s", e.Seq, e.Actor, e.At.Format(time.RFC3339Nano), e.Hash)
		}
	}
	require.True(t, rep.OK, "%+v", rep.Broken)
	committed := writers * (each - each/7 - btoi(each%7 > 3))
	require.EqualValues(t, committed, rep.Sealed)
	require.Zero(t, rep.Unsealed)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestAU3HorizonNeeded provokes the fault the horizon exists for, on
// PostgreSQL: a transaction draws seq n and commits only after seq n+1 was
// visible. The sealer must wait for it; the broken variant that seals up
// to the highest visible event (N) leaves n outside the chain, and Verify
// says so at n.
func TestAU3HorizonNeeded(t *testing.T) {
	t.Parallel()
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := testdb.Postgres(t)
			s := audit.NewSealer(st, nil)
			if broken {
				audit.SetNoHorizon(s)
			}
			appendEvent(t, st, &store.AuditEvent{Tenant: "t", Actor: "a", Action: "first", Subject: "s"})
			drawn, release, done := make(chan int64), make(chan struct{}), make(chan error)
			go func() {
				done <- st.InTx(ctx, func(tx store.Tx) error {
					e := &store.AuditEvent{Tenant: "t", Actor: "slow", Action: "late", Subject: "s"}
					if err := tx.AuditAppend(ctx, e); err != nil {
						return err
					}
					// Hold the number while the next event commits.
					if err := flushNow(tx); err != nil {
						return err
					}
					drawn <- e.Seq
					<-release
					return nil
				})
			}()
			late := <-drawn
			appendEvent(t, st, &store.AuditEvent{Tenant: "t", Actor: "fast", Action: "early", Subject: "s"})
			for range 3 {
				_, err := s.Seal(ctx)
				require.NoError(t, err)
			}
			if !broken {
				require.Less(t, s.Head().Seq, late, "nothing at or above a running transaction's number is sealed")
			}
			close(release)
			require.NoError(t, <-done)
			sealAll(t, s)
			rep := verify(t, st, nil)
			if broken {
				require.False(t, rep.OK, "without the horizon the late event falls outside the chain")
				require.Equal(t, late, rep.Broken.Seq, rep.Broken.Reason)
				return
			}
			require.True(t, rep.OK, "%+v", rep.Broken)
			require.EqualValues(t, 3, rep.Sealed)
		})
	}
}

// TestAU4Tampering: each edit a superuser (or the SQLite file's owner) can
// make is found by Verify at the right event; edits that leave a consistent
// chain are found against the checkpoint taken before them.
func TestAU4Tampering(t *testing.T) {
	t.Parallel()
	type setup struct {
		seqs []int64 // of the 10 events, in order
		gap  int64   // a number skipped between seqs[4] and seqs[5]
		cp   audit.Checkpoint
		s    *audit.Sealer
	}
	cases := []struct {
		name string
		// tamper returns the event Verify must name; withCP asks for the
		// checkpoint to find it.
		tamper func(t *testing.T, b *backend, u *setup) int64
		withCP bool
	}{
		{"edit a field", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`UPDATE audit_events SET actor = 'mallory' WHERE seq = %d`, u.seqs[3]))
			return u.seqs[3]
		}, false},
		{"edit details", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`UPDATE audit_events SET details = '{"n":0}' WHERE seq = %d`, u.seqs[6]))
			return u.seqs[6]
		}, false},
		{"edit time by a microsecond", func(t *testing.T, b *backend, u *setup) int64 {
			if b.name == "sqlite" {
				b.raw(t, fmt.Sprintf(`UPDATE audit_events SET at = at + 1 WHERE seq = %d`, u.seqs[2]))
			} else {
				b.raw(t, fmt.Sprintf(`UPDATE audit_events SET at = at + interval '1 microsecond' WHERE seq = %d`, u.seqs[2]))
			}
			return u.seqs[2]
		}, false},
		{"delete a middle event", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_events WHERE seq = %d`, u.seqs[5]))
			return u.seqs[5]
		}, false},
		{"delete a middle event and its link", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_events WHERE seq = %d`, u.seqs[5]))
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_chain WHERE seq = %d`, u.seqs[5]))
			return u.seqs[6]
		}, false},
		{"delete a middle link", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_chain WHERE seq = %d`, u.seqs[5]))
			return u.seqs[5]
		}, false},
		{"reorder two events", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`UPDATE audit_events SET seq = -1 WHERE seq = %d`, u.seqs[3]))
			b.raw(t, fmt.Sprintf(`UPDATE audit_events SET seq = %d WHERE seq = %d`, u.seqs[3], u.seqs[7]))
			b.raw(t, fmt.Sprintf(`UPDATE audit_events SET seq = %d WHERE seq = -1`, u.seqs[7]))
			return u.seqs[3]
		}, false},
		{"insert an event into a gap below the head", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`INSERT INTO audit_events (seq, tenant, at, actor, action, subject) VALUES (%d, 'ten', %s, 'mallory', 'run.approved', 'run_x')`, u.gap, nowLit(b)))
			return u.gap
		}, false},
		{"truncate the tail", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_events WHERE seq > %d`, u.seqs[7]))
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_chain WHERE seq > %d`, u.seqs[7]))
			return u.cp.Seq
		}, true},
		{"truncate and re-append", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_events WHERE seq > %d`, u.seqs[7]))
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_chain WHERE seq > %d`, u.seqs[7]))
			for _, s := range u.seqs[8:] {
				b.raw(t, fmt.Sprintf(`INSERT INTO audit_events (seq, tenant, at, actor, action, subject) VALUES (%d, 'ten', %s, 'mallory', 'forged', 'run_x')`, s, nowLit(b)))
			}
			sealAll(t, audit.NewSealer(b.st, nil))
			return u.cp.Seq
		}, true},
		{"rewrite an event and recompute the chain", func(t *testing.T, b *backend, u *setup) int64 {
			b.raw(t, fmt.Sprintf(`UPDATE audit_events SET actor = 'mallory' WHERE seq = %d`, u.seqs[1]))
			b.raw(t, fmt.Sprintf(`DELETE FROM audit_chain WHERE seq >= %d`, u.seqs[1]))
			sealAll(t, audit.NewSealer(b.st, nil))
			return u.cp.Seq
		}, true},
	}
	// The cases run one after the other (each on both stores at once): in
	// parallel they would hold dozens of PostgreSQL connections while the
	// rest of the suite needs them too.
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			backends(t, func(t *testing.T, b *backend) {
				u := &setup{s: audit.NewSealer(b.st, nil)}
				for i := range 10 {
					if i == 5 {
						b.gap(t)
					}
					e := &store.AuditEvent{Tenant: "ten", Actor: "alice", Action: "run.requested", Subject: fmt.Sprintf("run_%d", i),
						Details: json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"é🎉"}`, i))}
					appendEvent(t, b.st, e)
					u.seqs = append(u.seqs, e.Seq)
				}
				u.gap = u.seqs[5] - 1
				require.Greater(t, u.gap, u.seqs[4], "a gap was made")
				sealAll(t, u.s)
				rep := verify(t, b.st, nil)
				require.True(t, rep.OK, "%+v", rep.Broken)
				u.cp = rep.Head // the operator writes it down, outside the database
				require.Equal(t, u.seqs[9], u.cp.Seq)

				want := c.tamper(t, b, u)
				var cp *audit.Checkpoint
				if c.withCP {
					rep := verify(t, b.st, nil)
					require.True(t, rep.OK, "this edit leaves a consistent chain: only the checkpoint can show it (%+v)", rep.Broken)
					cp = &u.cp
				}
				rep = verify(t, b.st, cp)
				require.False(t, rep.OK, "tampering must be detected")
				require.Equal(t, want, rep.Broken.Seq, rep.Broken.Reason)
				t.Log(rep.Broken.Reason)
			})
		})
	}
}

func nowLit(b *backend) string {
	if b.name == "sqlite" {
		return "0"
	}
	return "now()"
}

// TestAU4AppRoleDenied: the role the server runs as cannot UPDATE, DELETE
// or TRUNCATE the audit tables (privileges), and neither can the owner
// while triggers are on (trigger); it can append and read, and the store
// works as that role.
func TestAU4AppRoleDenied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	st, err := postgres.Open(ctx, dsn)
	require.NoError(t, err)
	appendEvent(t, st, &store.AuditEvent{Tenant: "t", Actor: "a", Action: "x", Subject: "s"})
	sealAll(t, audit.NewSealer(st, nil))
	st.Close()

	owner, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer owner.Close(ctx)
	role := fmt.Sprintf("jp_app_%x", rand.Uint64())
	_, err = owner.Exec(ctx, `CREATE ROLE `+role+` LOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = c.Exec(context.Background(), `DROP OWNED BY `+role)
			_, _ = c.Exec(context.Background(), `DROP ROLE `+role)
			_ = c.Close(context.Background())
		}
	})
	_, err = owner.Exec(ctx, `SELECT jobplane_grant_app_role($1)`, role)
	require.NoError(t, err)

	mutations := []string{
		`UPDATE audit_events SET actor = 'mallory'`,
		`DELETE FROM audit_events`,
		`TRUNCATE audit_events`,
		`UPDATE audit_chain SET hash = 'x'`,
		`DELETE FROM audit_chain`,
		`TRUNCATE audit_chain`,
	}
	app, err := pgx.Connect(ctx, strings.Replace(dsn, "postgres@", role+"@", 1))
	require.NoError(t, err)
	defer app.Close(ctx)
	for _, q := range mutations {
		_, err := app.Exec(ctx, q)
		require.ErrorContains(t, err, "permission denied", "app role: %s", q)
		require.ErrorContains(t, err, "42501")
	}
	for _, q := range mutations {
		_, err := owner.Exec(ctx, q)
		require.ErrorContains(t, err, "audit history is append-only", "owner with triggers on: %s", q)
	}
	// The server works as the app role: it appends, lists, seals, verifies.
	appSt, err := postgres.Open(ctx, strings.Replace(dsn, "postgres@", role+"@", 1))
	require.NoError(t, err)
	defer appSt.Close()
	appendEvent(t, appSt, &store.AuditEvent{Tenant: "t", Actor: "a", Action: "y", Subject: "s"})
	sealAll(t, audit.NewSealer(appSt, nil))
	rep := verify(t, appSt, nil)
	require.True(t, rep.OK, "%+v", rep.Broken)
	require.EqualValues(t, 2, rep.Sealed)
}

// poolSuffix limits a DSN's pool (URL or key=value form).
func poolSuffix(dsn string, n int) string {
	switch {
	case strings.Contains(dsn, "://") && strings.Contains(dsn, "?"):
		return fmt.Sprintf("&pool_max_conns=%d", n)
	case strings.Contains(dsn, "://"):
		return fmt.Sprintf("?pool_max_conns=%d", n)
	}
	return fmt.Sprintf(" pool_max_conns=%d", n)
}

// flushNow has the store write the transaction's audit events now: on
// PostgreSQL they are written just before the commit, or before a read of
// the log in the same transaction, which this is.
func flushNow(tx store.Tx) error {
	_, err := tx.AuditList(context.Background(), &store.AuditListParams{Tenant: "t", Limit: 1})
	return err
}
