package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestRunRounds: two rounds, each verified on a database of its own, and
// a summary whose figures are the rounds' (the median of two is their
// mean). On PostgreSQL each round's schema is gone by the time its result
// is reported, and the database's own schema is left as it was.
func TestRunRounds(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			db := stores()[name](t)
			ctx := context.Background()
			var seen []int
			rs, err := RunRounds(ctx, Config{DB: db, Runs: 12, Workers: 2, Clients: 1, Dispatch: 2, Raw: true, RawBatch: 3}, 2,
				func(i int, res *Result) {
					seen = append(seen, i)
					if !res.Verification.OK() || res.Verification.Checked != 12+12+2 {
						t.Errorf("round %d: verification %+v", i, res.Verification)
					}
					if db != "" {
						if n := benchSchemas(t, db); n != 0 {
							t.Errorf("round %d: %d round schemas left in the database", i, n)
						}
					}
				})
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) != 2 || seen[0] != 1 || seen[1] != 2 || len(rs.Rounds) != 2 {
				t.Fatalf("rounds reported %v, results %d", seen, len(rs.Rounds))
			}
			s := rs.Summary
			a, b := rs.Rounds[0].Lifecycle.PerSecond, rs.Rounds[1].Lifecycle.PerSecond
			if s.Rounds != 2 || s.Lifecycle.Min != min(a, b) || s.Lifecycle.Max != max(a, b) || !near(s.Lifecycle.Median, (a+b)/2) {
				t.Errorf("lifecycle %+v from %v and %v", s.Lifecycle, a, b)
			}
			if len(s.Raw) != 2 || s.Raw[0].Batch != 1 || s.Raw[1].Batch != 3 || s.Raw[0].LifecycleRatio.Max <= 0 || s.Raw[0].LifecycleCPURatio.Max <= 0 {
				t.Errorf("raw spreads %+v", s.Raw)
			}
			if out := s.String(); !strings.Contains(out, "summary of 2 rounds") || !strings.Contains(out, "lifecycle/raw") {
				t.Errorf("summary:\n%s", out)
			}
			if db != "" {
				conn, err := pgx.Connect(ctx, db)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				var tables int
				if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&tables); err != nil {
					t.Fatal(err)
				}
				if tables != 0 {
					t.Errorf("the rounds wrote %d tables in the DSN's own schema", tables)
				}
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 0.001 && b-a < 0.001 }

// benchSchemas counts the rounds' schemas in the database of dsn.
func benchSchemas(t *testing.T, dsn string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'jobplane\_bench\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRunRoundsRefuses(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		cfg  Config
		n    int
		want string
	}{
		{Config{}, 0, "at least one"},
		{Config{DB: "sqlite:" + t.TempDir() + "/b.db"}, 2, "leave --db out"},
		{Config{Idle: 10}, 2, "idle and backlog"},
		{Config{Backlog: 10}, 2, "idle and backlog"},
		{Config{DB: "mysql://x"}, 2, "neither sqlite:PATH nor a postgres:// URL"},
	} {
		if _, err := RunRounds(ctx, c.cfg, c.n, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v × %d: %v, want an error with %q", c.cfg, c.n, err, c.want)
		}
	}
	// A database that does not answer stops the first round, named.
	_, err := RunRounds(ctx, Config{DB: "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"}, 2, nil)
	if err == nil || !strings.Contains(err.Error(), "round 1 of 2") {
		t.Errorf("unreachable database: %v", err)
	}
}

func TestSpreadOf(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{5}, Spread{5, 5, 5}},
		{[]float64{3, 1, 2}, Spread{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, Spread{2.5, 1, 4}},
	} {
		if got := spreadOf(c.in); got != c.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
