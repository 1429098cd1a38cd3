// Command river measures River (a Go job queue on PostgreSQL) moving no-op
// jobs on the database jobplane bench uses, at the same concurrency, so that
// docs/benchmarks.md can set jobplane's lifecycle rate against it in one
// session. It lives in a module of its own so that jobplane does not depend
// on River.
//
//	go run . -db 'postgres://postgres@127.0.0.1:5432/jpbench_river?sslmode=disable' -jobs 20000 -workers 8
//
// It migrates River's schema, inserts the jobs in one batch (not timed),
// starts a client with one queue of -workers workers and a 1 ms fetch
// cooldown (River's minimum: "tuned"), and times from Start to the moment
// every job is recorded completed in the database. It then checks that every
// job completed exactly once (one attempt each). Like jobplane bench it
// reports the CPU per job of this process and of the machine's postgres
// processes over that time, which the shared machine's load disturbs much
// less than the rate.
//
// The default mode matches jobplane bench's claim+result phase, whose runs
// are requested before it starts. With -insert-batch K the jobs are instead
// inserted K per call by -insert-clients goroutines while the workers run,
// and the inserts are timed too: the work of the lifecycle phase, which
// times each run's request.
//
// -sign and -audit N measure a floor rather than River: each job's worker
// also does two things every jobplane run must, and nothing else of what a
// run does. -sign mints a run token with jobplane's own code (an EdDSA JWS,
// internal/creds), as a claim does for every attempt. -audit N writes N
// rows per job into a table shaped like jobplane's audit_events (the same
// columns and indexes), in batches of up to 256 rows per COPY by one writer,
// with no hash chain, no sealing and no waiting for the write: the cheapest
// way to keep a run's three audit events. The rate River keeps while doing
// only that bounds what any design that keeps those two guarantees can
// reach against bare River on the same machine (docs/benchmarks.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	worked *atomic.Int64
	// floor: see the package comment; nil and 0 without -sign and -audit.
	issuer   *creds.Issuer
	audit    chan<- auditRow
	auditPer int
	tokenLen atomic.Int64
}

// auditRow is one row of the floor's audit table.
type auditRow struct {
	at      time.Time
	action  string
	subject string
}

var auditActions = []string{"run.requested", "run.claimed", "run.finished"}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	id := strconv.FormatInt(job.ID, 10)
	if w.issuer != nil {
		// What a claim mints for an attempt: the identity comes from the
		// attempt, the deadline from its lease.
		tok, _, err := w.issuer.Mint(creds.RunIdentity{
			RunID: "run_" + id, AttemptID: "att_" + id, Job: "noop", Channel: "main", Tenant: "default",
			Deadline: time.Now().Add(time.Hour),
		})
		if err != nil {
			return err
		}
		// Keep the token observable so that the signing is not dead code.
		w.tokenLen.Add(int64(len(tok)))
	}
	for i := range w.auditPer {
		w.audit <- auditRow{at: time.Now(), action: auditActions[i%len(auditActions)], subject: "run:run_" + id}
	}
	w.worked.Add(1)
	return nil
}

// floorAuditTable is jobplane's audit_events (migrations 001, 006 and
// 015) without its append-only triggers: the same columns, types and
// indexes.
const floorAuditTable = `
DROP TABLE IF EXISTS floor_audit_events;
CREATE TABLE floor_audit_events (
    seq     BIGSERIAL PRIMARY KEY,
    tenant  TEXT NOT NULL,
    at      TIMESTAMPTZ NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    subject TEXT NOT NULL,
    details JSON
);
CREATE INDEX floor_audit_events_tenant ON floor_audit_events (tenant, seq);
CREATE INDEX floor_audit_events_subject ON floor_audit_events (tenant, subject, seq);
CREATE INDEX floor_audit_events_actor ON floor_audit_events (tenant, actor, seq);`

// writeAudit copies rows into floor_audit_events, up to 256 per COPY, until
// rows is closed, and reports how many it wrote.
func writeAudit(ctx context.Context, pool *pgxpool.Pool, rows <-chan auditRow) (int64, error) {
	var written int64
	batch := make([][]any, 0, 256)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := pool.CopyFrom(ctx, pgx.Identifier{"floor_audit_events"},
			[]string{"tenant", "at", "actor", "action", "subject", "details"}, pgx.CopyFromRows(batch))
		written += n
		batch = batch[:0]
		return err
	}
	details := []byte(`{"job":"noop","channel":"main"}`)
	add := func(r auditRow) {
		batch = append(batch, []any{"default", r.at, "runner:bench", r.action, r.subject, details})
	}
	for r := range rows {
		add(r)
		// Take whatever else is already waiting, then write: a batch as
		// large as the moment allows, without a timer.
	more:
		for len(batch) < cap(batch) {
			select {
			case r, ok := <-rows:
				if !ok {
					break more
				}
				add(r)
			default:
				break more
			}
		}
		if err := flush(); err != nil {
			return written, err
		}
	}
	return written, flush()
}

func main() {
	db := flag.String("db", "", "PostgreSQL URL (a database of its own)")
	jobs := flag.Int("jobs", 20000, "jobs to insert and work")
	workers := flag.Int("workers", 8, "workers of the one queue")
	insertBatch := flag.Int("insert-batch", 0, "insert the jobs while the workers run, this many per InsertManyFast call, and time the inserts too (0: insert them all before starting, not timed)")
	insertClients := flag.Int("insert-clients", 4, "with -insert-batch: goroutines inserting at once")
	sign := flag.Bool("sign", false, "floor: each job also mints a jobplane run token (EdDSA JWS)")
	auditPer := flag.Int("audit", 0, "floor: each job also writes this many rows to a table shaped like jobplane's audit_events (batched, no chain)")
	flag.Parse()
	if *auditPer < 0 {
		fmt.Fprintln(os.Stderr, "river bench: -audit must not be negative")
		os.Exit(2)
	}
	if err := run(*db, *jobs, *workers, *insertBatch, *insertClients, floor{sign: *sign, audit: *auditPer}); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

// floor holds the -sign and -audit choices.
type floor struct {
	sign  bool
	audit int
}

func run(dsn string, jobs, workers, insertBatch, insertClients int, fl floor) error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(workers + 4 + insertClients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}
	var worked atomic.Int64
	worker := &noopWorker{worked: &worked, auditPer: fl.audit}
	if fl.sign {
		keys := creds.NewKeySet(creds.DefaultMaxLifetime)
		rec, err := creds.GenerateKey(time.Now())
		if err != nil {
			return err
		}
		if err := keys.Add(rec); err != nil {
			return err
		}
		worker.issuer, err = creds.NewIssuer(creds.IssuerConfig{Issuer: "http://127.0.0.1", Clock: clock.Real{}, Keys: keys})
		if err != nil {
			return err
		}
	}
	var auditRows chan auditRow
	auditDone := make(chan error, 1)
	var auditWritten int64
	if fl.audit > 0 {
		if _, err := pool.Exec(ctx, floorAuditTable); err != nil {
			return err
		}
		auditRows = make(chan auditRow, 4096)
		worker.audit = auditRows
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, worker)
	client, err := river.NewClient(driver, &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:       ws,
		FetchCooldown: time.Millisecond,
		Logger:        nil,
	})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, jobs)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	if insertBatch <= 0 {
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	cpu0, db0 := processCPU(), postgresCPU()
	start := time.Now()
	if auditRows != nil {
		go func() {
			n, err := writeAudit(ctx, pool, auditRows)
			auditWritten = n
			auditDone <- err
		}()
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	insertErr := make(chan error, 1)
	if insertBatch > 0 {
		// Like jobplane bench's lifecycle phase: clients insert batches of
		// jobs while the workers take them, and the clock runs from the
		// first insert to the last completion.
		var next atomic.Int64
		var wg sync.WaitGroup
		for range insertClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					hi := int(next.Add(int64(insertBatch)))
					lo := hi - insertBatch
					if lo >= jobs {
						return
					}
					if _, err := client.InsertManyFast(ctx, params[lo:min(hi, jobs)]); err != nil {
						select {
						case insertErr <- fmt.Errorf("insert: %w", err):
						default:
						}
						return
					}
				}
			}()
		}
		go func() { wg.Wait(); close(insertErr) }()
	}
	var completed int
	for {
		// Count in the database only once every job has been worked: a
		// count every few milliseconds all along would add its own
		// PostgreSQL CPU to River's.
		if worked.Load() >= int64(jobs) {
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
				return err
			}
			if completed >= jobs {
				break
			}
		}
		select {
		case err, ok := <-insertErr:
			if ok && err != nil {
				return err
			}
		default:
		}
		if time.Since(start) > 10*time.Minute {
			return errors.New("not every job completed within ten minutes")
		}
		time.Sleep(time.Millisecond)
	}
	if auditRows != nil {
		// Every worker has returned, so nothing sends any more; the clock
		// stops once the last audit row is written too.
		close(auditRows)
		if err := <-auditDone; err != nil {
			return fmt.Errorf("audit rows: %w", err)
		}
	}
	elapsed := time.Since(start)
	cpu, db := processCPU()-cpu0, postgresCPU()-db0
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return err
	}
	var done, bad int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE attempt <> 1)
		FROM river_job`).Scan(&done, &bad); err != nil {
		return err
	}
	if done != jobs || bad != 0 || worked.Load() != int64(jobs) {
		return fmt.Errorf("%d of %d jobs completed, %d with other than one attempt, %d worked", done, jobs, bad, worked.Load())
	}
	if want := int64(jobs * fl.audit); auditWritten != want {
		return fmt.Errorf("%d audit rows written, want %d", auditWritten, want)
	}
	if fl.sign && worker.tokenLen.Load() == 0 {
		return errors.New("no run token minted")
	}
	log.SetFlags(0)
	mode := "inserted before, not timed"
	if insertBatch > 0 {
		mode = fmt.Sprintf("inserted while working, %d per call from %d clients, timed", insertBatch, insertClients)
	}
	perJob := func(d time.Duration) float64 { return float64(d/time.Microsecond) / float64(jobs) }
	if fl.sign {
		mode += "; each mints a run token"
	}
	if fl.audit > 0 {
		mode += fmt.Sprintf("; each writes %d audit rows", fl.audit)
	}
	log.Printf("river %s: %d no-op jobs (%s), %d workers, fetch cooldown 1ms: %.1f jobs/s (%.2fs; %.0f µs CPU/job + %.0f µs in PostgreSQL); every job completed once",
		"v0.51.2", jobs, mode, workers, float64(jobs)/elapsed.Seconds(), elapsed.Seconds(), perJob(cpu), perJob(db))
	return nil
}

// processCPU is this process's CPU time, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU sums the CPU time of this machine's postgres processes
// (user and system, with that of reaped children), as jobplane bench
// does: 0 where /proc cannot be read or the server runs elsewhere.
func postgresCPU() time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var ticks int64
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 15 {
			continue
		}
		for _, v := range f[11:15] { // utime, stime, cutime, cstime
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				ticks += n
			}
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}
