package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/config"
)

// A single benchmark run says little on a shared machine: the same build
// moves by a third from one run to the next. RunRounds repeats the
// measurement, each round on a database of its own, and reports the median
// and range of each figure, which is how docs/benchmarks.md reports them.

// Rounds is a measurement repeated.
type Rounds struct {
	Rounds  []*Result `json:"rounds"`
	Summary Summary   `json:"summary"`
}

// Spread is one figure over the rounds: the median (the mean of the two
// middle values for an even count) and the range.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summary is the spread of the figures the targets are stated in.
type Summary struct {
	Rounds int `json:"rounds"`
	// Request, ClaimResult and Lifecycle are the phases' rates, runs/s.
	Request     Spread `json:"request_per_second"`
	ClaimResult Spread `json:"claim_result_per_second"`
	Lifecycle   Spread `json:"lifecycle_per_second"`
	// LifecycleCPUUs and LifecycleDBCPUUs are a lifecycle run's CPU, this
	// process's and PostgreSQL's, in microseconds.
	LifecycleCPUUs   Spread `json:"lifecycle_cpu_us"`
	LifecycleDBCPUUs Spread `json:"lifecycle_db_cpu_us,omitzero"`
	// DispatchP99ms is request→claimed p99 with every runner idle.
	DispatchP99ms Spread `json:"dispatch_p99_ms"`
	// Raw has one entry per raw loop (with --raw), in the rounds' order.
	Raw []RawSpread `json:"raw,omitempty"`
}

// RawSpread is a raw loop over the rounds, and the lifecycle's ratio to it
// measured in each round.
type RawSpread struct {
	Batch     int    `json:"batch"`
	PerSecond Spread `json:"per_second"`
	// LifecycleRatio is lifecycle/raw by rate, LifecycleCPURatio by CPU
	// (the raw loop's CPU per job over the lifecycle's per run).
	LifecycleRatio    Spread `json:"lifecycle_ratio"`
	LifecycleCPURatio Spread `json:"lifecycle_cpu_ratio"`
}

// RunRounds runs the measurement cfg describes n times, each round on a
// database of its own: a temporary SQLite database, or on PostgreSQL a
// fresh schema of the database cfg.DB names, dropped after its round.
// done, when set, is called with each round's result as it ends. A round
// that fails stops the rounds; its error names the round, and a round
// whose runs did not verify keeps its schema for inspection. The idle and
// backlog measurements, and a SQLite file named by cfg.DB (not fresh from
// the second round on), are refused.
func RunRounds(ctx context.Context, cfg Config, n int, done func(round int, res *Result)) (*Rounds, error) {
	if n < 1 {
		return nil, errors.New("rounds: at least one")
	}
	if cfg.Idle > 0 || cfg.Backlog > 0 {
		return nil, errors.New("rounds repeat the usual phases; the idle and backlog measurements are run once")
	}
	driver := ""
	if cfg.DB != "" {
		d, _, err := config.ParseDSN(cfg.DB)
		if err != nil {
			return nil, err
		}
		driver = d
	}
	if driver == "sqlite" && n > 1 {
		return nil, errors.New("rounds on SQLite run in a temporary database each: leave --db out (a file named by --db would not be fresh from the second round on)")
	}
	out := &Rounds{}
	tag := strings.ToLower(rand.Text()[:8])
	for i := 1; i <= n; i++ {
		rc := cfg
		schema := ""
		if driver == "postgres" {
			schema = fmt.Sprintf("jobplane_bench_%s_%d", tag, i)
			dsn, err := freshSchema(ctx, cfg.DB, schema)
			if err != nil {
				return out, fmt.Errorf("round %d of %d: %w", i, n, err)
			}
			rc.DB = dsn
		}
		res, err := Run(ctx, rc)
		if schema != "" {
			if errors.Is(err, ErrVerify) {
				err = fmt.Errorf("%w (the round's rows are kept in schema %s)", err, schema)
			} else {
				err = errors.Join(err, dropSchema(context.WithoutCancel(ctx), cfg.DB, schema))
			}
		}
		if res != nil {
			out.Rounds = append(out.Rounds, res)
			if done != nil {
				done(i, res)
			}
		}
		if err != nil {
			return out, fmt.Errorf("round %d of %d: %w", i, n, err)
		}
	}
	out.Summary = summarize(out.Rounds)
	return out, nil
}

// freshSchema creates schema in the database dsn names and returns dsn with
// it as the search path: every pooled connection of the server and of the
// raw loop starts in it.
func freshSchema(ctx context.Context, dsn, schema string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("--db: %w", err)
	}
	if err := execPostgres(ctx, dsn, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema %s for the round: %w", schema, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func dropSchema(ctx context.Context, dsn, schema string) error {
	if err := execPostgres(ctx, dsn, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop the round's schema %s: %w", schema, err)
	}
	return nil
}

func execPostgres(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// summarize is the spread of the rounds' figures.
func summarize(rs []*Result) Summary {
	sum := Summary{Rounds: len(rs)}
	of := func(f func(r *Result) float64) Spread {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = f(r)
		}
		return spreadOf(vs)
	}
	sum.Request = of(func(r *Result) float64 { return r.Request.PerSecond })
	sum.ClaimResult = of(func(r *Result) float64 { return r.ClaimResult.PerSecond })
	sum.Lifecycle = of(func(r *Result) float64 { return r.Lifecycle.PerSecond })
	sum.LifecycleCPUUs = of(func(r *Result) float64 { return r.Lifecycle.CPUPerOpUs })
	sum.LifecycleDBCPUUs = of(func(r *Result) float64 { return r.Lifecycle.DBCPUPerOpUs })
	sum.DispatchP99ms = of(func(r *Result) float64 { return r.DispatchLatency.P99ms })
	if len(rs) == 0 {
		return sum
	}
	for k := range rs[0].Raw {
		if !slices.ContainsFunc(rs, func(r *Result) bool { return len(r.Raw) <= k }) {
			sum.Raw = append(sum.Raw, RawSpread{
				Batch:     rs[0].Raw[k].Batch,
				PerSecond: of(func(r *Result) float64 { return r.Raw[k].Phase.PerSecond }),
				LifecycleRatio: of(func(r *Result) float64 {
					return ratio(r.Lifecycle.PerSecond, r.Raw[k].Phase.PerSecond)
				}),
				LifecycleCPURatio: of(func(r *Result) float64 {
					return ratio(cpuTotal(r.Raw[k].Phase), cpuTotal(r.Lifecycle))
				}),
			})
		}
	}
	return sum
}

// spreadOf is the median and range of vs (zero for none).
func spreadOf(vs []float64) Spread {
	if len(vs) == 0 {
		return Spread{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: math.Round(m*1000) / 1000, Min: s[0], Max: s[len(s)-1]}
}

// String is the summary in the words of Result.String, each figure its
// median, then its range.
func (s Summary) String() string {
	sp := func(v Spread, format string) string {
		return fmt.Sprintf(format+" ("+format+"–"+format+")", v.Median, v.Min, v.Max)
	}
	out := fmt.Sprintf("summary of %d rounds: median (range)\n", s.Rounds)
	out += "  request        " + sp(s.Request, "%.1f") + " runs/s\n"
	out += "  claim+result   " + sp(s.ClaimResult, "%.1f") + " runs/s\n"
	out += "  lifecycle      " + sp(s.Lifecycle, "%.1f") + " runs/s; " + sp(s.LifecycleCPUUs, "%.0f") + " µs CPU/run"
	if s.LifecycleDBCPUUs.Max > 0 {
		out += " + " + sp(s.LifecycleDBCPUUs, "%.0f") + " µs in PostgreSQL"
	}
	out += "\n"
	out += "  dispatch       request→claimed p99 " + sp(s.DispatchP99ms, "%.2f") + " ms\n"
	for _, r := range s.Raw {
		out += fmt.Sprintf("  raw loop       %s jobs/s (%d rows per transaction); lifecycle/raw %s", sp(r.PerSecond, "%.1f"), r.Batch, sp(r.LifecycleRatio, "%.3f"))
		if r.LifecycleCPURatio.Max > 0 {
			out += "; by CPU " + sp(r.LifecycleCPURatio, "%.3f")
		}
		out += "\n"
	}
	return out
}
