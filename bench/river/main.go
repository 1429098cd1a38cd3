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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	worked *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.worked.Add(1)
	return nil
}

func main() {
	db := flag.String("db", "", "PostgreSQL URL (a database of its own)")
	jobs := flag.Int("jobs", 20000, "jobs to insert and work")
	workers := flag.Int("workers", 8, "workers of the one queue")
	insertBatch := flag.Int("insert-batch", 0, "insert the jobs while the workers run, this many per InsertManyFast call, and time the inserts too (0: insert them all before starting, not timed)")
	insertClients := flag.Int("insert-clients", 4, "with -insert-batch: goroutines inserting at once")
	flag.Parse()
	if err := run(*db, *jobs, *workers, *insertBatch, *insertClients); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

func run(dsn string, jobs, workers, insertBatch, insertClients int) error {
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
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{worked: &worked})
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
	log.SetFlags(0)
	mode := "inserted before, not timed"
	if insertBatch > 0 {
		mode = fmt.Sprintf("inserted while working, %d per call from %d clients, timed", insertBatch, insertClients)
	}
	perJob := func(d time.Duration) float64 { return float64(d/time.Microsecond) / float64(jobs) }
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
