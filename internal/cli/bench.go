package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"

	"github.com/jobplane/jobplane/internal/bench"
	"github.com/jobplane/jobplane/internal/protocol"
)

// BenchCmd measures request and claim+result throughput of no-op runs
// through the HTTP API on an in-process server.
type BenchCmd struct {
	DB                string `name:"db" help:"Store to measure: sqlite:PATH or a postgres:// URL (default: SQLite in a temporary directory). The benchmark inserts rows: use a database of its own." placeholder:"DSN"`
	Runs              int    `default:"2000" help:"Runs to request and then claim."`
	Workers           int    `default:"8" help:"Runner identities claiming concurrently."`
	Clients           int    `default:"4" help:"Concurrent clients requesting runs."`
	Dispatch          int    `default:"200" help:"Runs of the dispatch-latency phase (one at a time, runners idle in long polls)."`
	ClaimMax          int    `name:"claim-max" default:"1" help:"Attempts a runner claims per request in the claim+result and lifecycle phases (the claim's max); above 1 each runner works on that many at once."`
	BatchResults      bool   `name:"batch-results" help:"Have a runner report the results of the attempts it claimed together in one signed call (POST /v1/runner/results) instead of one call each; useful with --claim-max."`
	RequestBatch      int    `name:"request-batch" default:"1" help:"Runs a client requests per call in the request and lifecycle phases (POST /v1/runs/batch above 1, as a backfill would); the dispatch phase always requests one at a time."`
	CommitBatch       int    `name:"commit-batch" default:"0" help:"Calls per group transaction on the server (0: its default; 1: group commit off, for comparison)."`
	CommitConcurrency int    `name:"commit-concurrency" default:"0" help:"Group transactions the server lets run their calls at once on PostgreSQL, with as many more committing (0: its default, 2)."`
	Backlog           int    `help:"PostgreSQL: instead of the usual phases, queue this many runs in bulk, then claim and finish --runs of them and report claim latency and the claim statement's EXPLAIN ANALYZE." placeholder:"N"`
	Idle              int    `help:"Instead of the usual phases, have this many runners wait in long polls; report memory, then dispatch latency over --dispatch runs." placeholder:"N"`
	IdleProcs         int    `name:"idle-procs" help:"With --idle: put the waiting runners in this many child processes, so that the memory reported is the server's alone (and more runners fit under the per-process descriptor limit)." placeholder:"P"`
	Renew             bool   `name:"renew" help:"Have each lifecycle run renew its lease once before its result, a heavier lifecycle kept for comparison. The worker renews every third of the lease TTL, so a no-op job never does."`
	LogsApart         bool   `name:"logs-apart" help:"Send each lifecycle run's log chunk in a call of its own before the result, instead of with the result as the worker does (the request shape before the result carried logs)."`
	Raw               bool   `help:"Also run a raw SKIP LOCKED claim+complete loop on the same database (one row per transaction, then --raw-batch rows per statement) and print jobplane's rates as ratios of it."`
	RawBatch          int    `name:"raw-batch" default:"10" help:"Rows per statement of the batched raw loop."`
	GCHeapFloor       int    `name:"gc-heap-floor" default:"256" help:"MiB the process's heap may grow to before the garbage collector runs, as jobplane server's default (0: Go's default; GOGC, when set, wins)." placeholder:"MIB"`
	Rounds            int    `default:"1" help:"Repeat the measurement this many times, each round on a database of its own (SQLite: a temporary one; PostgreSQL: a fresh schema of --db's database, dropped after its round), and print the median and range of each figure." placeholder:"N"`
	JSON              bool   `help:"Print the result as JSON." name:"json"`
	LogLevel          string `default:"error" enum:"debug,info,warn,error" help:"Server log level (to stderr)."`
	// CPUProfile profiles the whole process: server, clients and runners
	// share it, as they share the machine.
	CPUProfile string `name:"cpuprofile" help:"Write a CPU profile of the whole benchmark (server and callers) to this file." placeholder:"FILE"`
	// ProfilePhase narrows the profile to one phase, whose cost would
	// otherwise be mixed with the others' (the raw loops above all).
	ProfilePhase string `name:"profile-phase" enum:",request,claim+result,lifecycle,dispatch" default:"" help:"With --cpuprofile or --memprofile: profile only this phase (request, claim+result, lifecycle or dispatch)."`
	// MemProfile finds the garbage: the collector's cost grows with what
	// is allocated, not with what is kept.
	MemProfile string `name:"memprofile" help:"Write an allocation profile to this file; with --profile-phase also FILE.base as the phase starts (go tool pprof -sample_index=alloc_space -base FILE.base jobplane FILE)." placeholder:"FILE"`
}

// Run performs the measurement. It fails (exit 1) when any run did not
// succeed exactly once.
func (c *BenchCmd) Run(g *Globals) error {
	if bench.IsIdleChild() {
		return bench.IdleChild(g.Ctx, g.Stdin, g.Stdout)
	}
	if c.ClaimMax < 1 || c.ClaimMax > protocol.MaxClaimBatch {
		return fmt.Errorf("--claim-max must be 1..%d", protocol.MaxClaimBatch)
	}
	if c.RequestBatch < 1 || c.RequestBatch > protocol.MaxRunBatch {
		return fmt.Errorf("--request-batch must be 1..%d", protocol.MaxRunBatch)
	}
	stopGC, err := startHeapFloor("--gc-heap-floor", c.GCHeapFloor)
	if err != nil {
		return err
	}
	defer stopGC()
	if c.Runs < 1 || c.Workers < 1 || c.Clients < 1 {
		return errors.New("--runs, --workers and --clients must be at least 1")
	}
	switch {
	case c.Rounds < 1:
		return errors.New("--rounds must be at least 1")
	case c.Rounds > 1 && (c.CPUProfile != "" || c.MemProfile != ""):
		return errors.New("--rounds: profile one round at a time (--cpuprofile and --memprofile take one run)")
	case c.Rounds > 1 && (c.Idle > 0 || c.Backlog > 0):
		return errors.New("--rounds repeats the usual phases; --idle and --backlog are measured once")
	}
	cfg := bench.Config{
		DB: c.DB, Runs: c.Runs, Workers: c.Workers, Clients: c.Clients, Raw: c.Raw, RawBatch: c.RawBatch,
		Dispatch: c.Dispatch, CommitBatch: c.CommitBatch, CommitConcurrency: c.CommitConcurrency, ClaimMax: c.ClaimMax, LogsApart: c.LogsApart, Renew: c.Renew, BatchResults: c.BatchResults, RequestBatch: c.RequestBatch, Backlog: c.Backlog, Idle: c.Idle, IdleProcs: c.IdleProcs,
		Logger: newLogger(g.Stderr, c.LogLevel),
	}
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if c.ProfilePhase == "" {
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		} else {
			var profErr error
			cfg.PhaseHook = func(phase string, start bool) {
				switch {
				case phase != c.ProfilePhase:
				case start:
					profErr = pprof.StartCPUProfile(f)
				case profErr == nil:
					pprof.StopCPUProfile()
				}
			}
			defer func() {
				if profErr != nil {
					fmt.Fprintf(g.Stderr, "jobplane bench: cpu profile: %v\n", profErr)
				}
			}()
		}
	} else if c.ProfilePhase != "" && c.MemProfile == "" {
		return errors.New("--profile-phase needs --cpuprofile or --memprofile")
	}
	if c.MemProfile != "" {
		mp := &memProfile{path: c.MemProfile, phase: c.ProfilePhase}
		cpuHook := cfg.PhaseHook
		cfg.PhaseHook = func(phase string, start bool) {
			if cpuHook != nil {
				cpuHook(phase, start)
			}
			mp.hook(phase, start)
		}
		defer func() {
			if err := mp.finish(); err != nil {
				fmt.Fprintf(g.Stderr, "jobplane bench: memory profile: %v\n", err)
			}
		}()
	}
	if c.IdleProcs > 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--idle-procs: find this program to start its children: %w", err)
		}
		cfg.IdleCommand = []string{exe, "bench"}
	}
	tty := benchIsTerminal(g.Stderr)
	if tty {
		cfg.Progress = func(phase string, done, total int) {
			fmt.Fprintf(g.Stderr, "\r%-13s %6d/%d", phase, done, total)
		}
	}
	if c.Rounds != 1 {
		return c.runRounds(g, cfg, tty)
	}
	res, err := bench.Run(g.Ctx, cfg)
	if tty {
		fmt.Fprint(g.Stderr, "\r\033[K")
	}
	if res != nil {
		if c.JSON {
			if perr := printJSON(g.Stdout, res); perr != nil {
				return errors.Join(err, perr)
			}
		} else {
			fmt.Fprint(g.Stdout, res.String())
		}
	}
	if errors.Is(err, context.Canceled) && g.Ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return err
}

// runRounds is Run with --rounds: each round's report as it ends, then
// the summary; with --json one object with both.
func (c *BenchCmd) runRounds(g *Globals, cfg bench.Config, tty bool) error {
	progress := cfg.Progress
	var round atomic.Int64 // rounds done, read by the progress goroutines
	if progress != nil {
		cfg.Progress = func(phase string, done, total int) {
			progress(fmt.Sprintf("%d/%d %s", round.Load()+1, c.Rounds, phase), done, total)
		}
	}
	rs, err := bench.RunRounds(g.Ctx, cfg, c.Rounds, func(i int, res *bench.Result) {
		round.Store(int64(i))
		if tty {
			fmt.Fprint(g.Stderr, "\r\033[K")
		}
		if !c.JSON {
			fmt.Fprintf(g.Stdout, "round %d of %d\n%s", i, c.Rounds, res.String())
		}
	})
	if tty {
		fmt.Fprint(g.Stderr, "\r\033[K")
	}
	if err == nil {
		if c.JSON {
			err = printJSON(g.Stdout, rs)
		} else {
			fmt.Fprint(g.Stdout, rs.Summary.String())
		}
	} else if c.JSON && rs != nil && len(rs.Rounds) > 0 {
		err = errors.Join(err, printJSON(g.Stdout, rs))
	}
	if errors.Is(err, context.Canceled) && g.Ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return err
}

// memProfile writes the allocation profile. The runtime counts from the
// process's start, so with a phase it writes two: FILE.base as the phase
// starts and FILE as it ends, to be read with pprof's -base.
type memProfile struct {
	path  string
	phase string
	done  bool
	err   error
}

func (m *memProfile) write(path string) error {
	runtime.GC() // the profile is as of the last collection
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (m *memProfile) hook(phase string, start bool) {
	if m.phase == "" || phase != m.phase || m.err != nil {
		return
	}
	if start {
		m.err = m.write(m.path + ".base")
		return
	}
	m.err = m.write(m.path)
	m.done = true
}

func (m *memProfile) finish() error {
	switch {
	case m.err != nil:
		return m.err
	case m.phase == "":
		return m.write(m.path)
	case !m.done:
		return fmt.Errorf("phase %q did not run", m.phase)
	}
	return nil
}

// benchIsTerminal reports whether w is a character device (a terminal).
func benchIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
