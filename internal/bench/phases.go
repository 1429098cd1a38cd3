package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// group runs goroutines that share a context; the first error cancels the
// others and is the group's error.
type group struct {
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func newGroup(ctx context.Context) (*group, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &group{cancel: cancel}, ctx
}

func (g *group) Go(fn func() error) {
	g.wg.Go(func() {
		if err := fn(); err != nil {
			g.once.Do(func() { g.err = err; g.cancel() })
		}
	})
}

func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}

// Requested is the outcome of the request phase.
type Requested struct {
	Phase   Phase
	Latency Latency
	// CreatedAt maps each created run to its created_at as the server
	// recorded it.
	CreatedAt map[string]time.Time
}

// RequestRuns creates n runs of Job with `clients` concurrent callers, each
// taking the next index until n are created. done counts created runs
// (may be nil).
func (e *Env) RequestRuns(ctx context.Context, n, clients int, done *atomic.Int64) (*Requested, error) {
	if done == nil {
		done = new(atomic.Int64)
	}
	clients = max(min(clients, n), 1)
	var next atomic.Int64
	type local struct {
		lat     []time.Duration
		created map[string]time.Time
		last    time.Time
	}
	locals := make([]local, clients)
	g, gctx := newGroup(ctx)
	start := clock.Real{}.Now()
	for c := range clients {
		l := &locals[c]
		l.created = make(map[string]time.Time, n/clients+1)
		g.Go(func() error {
			for {
				k := takeRequests(&next, n, e.RequestBatch)
				if k == 0 {
					break
				}
				t0 := clock.Real{}.Now()
				runs, err := e.request(gctx, k, e.RequestBatch)
				t1 := clock.Real{}.Now()
				if err != nil {
					return err
				}
				for _, run := range runs {
					l.lat = append(l.lat, t1.Sub(t0))
					l.created[run.ID] = run.CreatedAt
				}
				l.last = t1
				done.Add(int64(k))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := &Requested{CreatedAt: make(map[string]time.Time, n)}
	var lat []time.Duration
	var last time.Time
	for _, l := range locals {
		lat = append(lat, l.lat...)
		for k, v := range l.created {
			out.CreatedAt[k] = v
		}
		if l.last.After(last) {
			last = l.last
		}
	}
	if len(out.CreatedAt) != n {
		return nil, fmt.Errorf("request phase: %d distinct runs created, want %d", len(out.CreatedAt), n)
	}
	out.Phase = newPhase(n, last.Sub(start))
	out.Latency = Summarize(lat)
	return out, nil
}

// takeRequests takes the next runs to request, up to batch of the n in all
// that next counts; 0 when none are left.
func takeRequests(next *atomic.Int64, n, batch int) int {
	b := int64(max(batch, 1))
	first := next.Add(b) - b
	return int(min(b, max(int64(n)-first, 0)))
}

// request requests k queued runs of Job: in one POST /v1/runs/batch when
// batch is above 1, else (k is 1) in one POST /v1/runs.
func (e *Env) request(ctx context.Context, k, batch int) ([]*protocol.Run, error) {
	if batch <= 1 {
		return e.requestOne(ctx)
	}
	reqs := make([]protocol.RunRequest, k)
	for i := range reqs {
		reqs[i] = protocol.RunRequest{Job: Job, Channel: Channel}
	}
	answers, err := e.Admin.CreateRunsBrief(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("request runs: %w", err)
	}
	runs := make([]*protocol.Run, k)
	for i, a := range answers {
		if a.Err != nil {
			return nil, fmt.Errorf("request runs: item %d: %w", i, a.Err)
		}
		if !a.Created {
			return nil, fmt.Errorf("request runs: item %d: run %s was not created by this request", i, a.Run.ID)
		}
		if a.Run.State != "queued" {
			return nil, fmt.Errorf("request runs: run %s is %s, want queued", a.Run.ID, a.Run.State)
		}
		runs[i] = a.Run
	}
	return runs, nil
}

// requestOne requests one queued run of Job with POST /v1/runs.
func (e *Env) requestOne(ctx context.Context) ([]*protocol.Run, error) {
	run, err := e.Admin.CreateRun(ctx, &protocol.RunRequest{Job: Job, Channel: Channel})
	if err != nil {
		return nil, fmt.Errorf("request run: %w", err)
	}
	if run.State != "queued" {
		return nil, fmt.Errorf("request run: run %s is %s, want queued", run.ID, run.State)
	}
	return []*protocol.Run{run}, nil
}

// Drained is the outcome of the claim+result phase.
type Drained struct {
	// Phase counts runs claimed and finished; its time ends at the last
	// accepted result, so the empty claims that end each worker's loop are
	// not counted.
	Phase Phase
	// ClaimLatency is of the claims that returned an assignment.
	ClaimLatency  Latency
	ResultLatency Latency
	// RequestToClaimed runs from a run's created_at (server clock) to the
	// moment its claim answer arrived (client clock, same machine). Only
	// runs in createdAt are counted.
	RequestToClaimed Latency
	// Claims counts the claims the workers received per run.
	Claims map[string]int
	// EmptyClaims counts 204 answers.
	EmptyClaims int
}

// emptyToStop is how many consecutive empty claims end a worker's loop.
const emptyToStop = 2

// Drain has every runner, each in its own goroutine, loop claim (wait 0) →
// result (succeeded) until it gets emptyToStop empty answers in a row.
// createdAt (may be nil) gives the runs' creation times for the
// request→claimed latency; done counts accepted results (may be nil).
func (e *Env) Drain(ctx context.Context, runners []*Runner, createdAt map[string]time.Time, done *atomic.Int64) (*Drained, error) {
	return e.drain(ctx, runners, createdAt, done, 0)
}

// drain is Drain that stops after limit claims when limit > 0.
func (e *Env) drain(ctx context.Context, runners []*Runner, createdAt map[string]time.Time, done *atomic.Int64, limit int) (*Drained, error) {
	var reserved atomic.Int64
	if done == nil {
		done = new(atomic.Int64)
	}
	type local struct {
		claimLat, resultLat, r2c []time.Duration
		claims                   map[string]int
		empty                    int
		last                     time.Time
	}
	locals := make([]local, len(runners))
	g, gctx := newGroup(ctx)
	start := clock.Real{}.Now()
	for i, r := range runners {
		l := &locals[i]
		l.claims = map[string]int{}
		g.Go(func() error {
			for empties := 0; empties < emptyToStop; {
				if limit > 0 && reserved.Add(1) > int64(limit) {
					break
				}
				t0 := clock.Real{}.Now()
				var asgs []*protocol.Assignment
				var err error
				if e.ClaimMax > 1 && limit == 0 {
					asgs, err = r.Client.ClaimMany(gctx, 0, e.ClaimMax, "")
				} else {
					var asg *protocol.Assignment
					if asg, err = r.Client.Claim(gctx, 0, ""); asg != nil {
						asgs = []*protocol.Assignment{asg}
					}
				}
				t1 := clock.Real{}.Now()
				if err != nil {
					return fmt.Errorf("runner %s: claim: %w", r.ID, err)
				}
				if len(asgs) == 0 {
					reserved.Add(-1)
					empties++
					l.empty++
					continue
				}
				empties = 0
				l.claimLat = append(l.claimLat, t1.Sub(t0))
				for _, asg := range asgs {
					l.claims[asg.RunID]++
					if c, ok := createdAt[asg.RunID]; ok {
						l.r2c = append(l.r2c, t1.Sub(c))
					}
				}
				t2 := clock.Real{}.Now()
				if err := r.plainResults(gctx, asgs); err != nil {
					return err
				}
				t3 := clock.Real{}.Now()
				l.resultLat = append(l.resultLat, t3.Sub(t2))
				l.last = t3
				done.Add(int64(len(asgs)))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := &Drained{Claims: map[string]int{}}
	var claimLat, resultLat, r2c []time.Duration
	last := start
	for _, l := range locals {
		claimLat = append(claimLat, l.claimLat...)
		resultLat = append(resultLat, l.resultLat...)
		r2c = append(r2c, l.r2c...)
		for k, v := range l.claims {
			out.Claims[k] += v
		}
		out.EmptyClaims += l.empty
		if l.last.After(last) {
			last = l.last
		}
	}
	ran := 0
	for _, n := range out.Claims {
		ran += n
	}
	out.Phase = newPhase(ran, last.Sub(start))
	out.ClaimLatency = Summarize(claimLat)
	out.ResultLatency = Summarize(resultLat)
	out.RequestToClaimed = Summarize(r2c)
	return out, nil
}

// plainResults reports success, with no log chunk, for attempts claimed
// together: in one call with BatchResults, else a call each, at once.
func (r *Runner) plainResults(ctx context.Context, asgs []*protocol.Assignment) error {
	if r.BatchResults {
		return r.finishBatch(ctx, asgs, time.Time{}, false)
	}
	errs := make([]error, len(asgs))
	var wg sync.WaitGroup
	for i, asg := range asgs {
		wg.Go(func() {
			ref := apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}
			res, err := r.Client.Result(ctx, ref, protocol.ResultRequest{Outcome: "succeeded", Summary: "bench"})
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("runner %s: result of run %s: %w", r.ID, asg.RunID, err)
			case res.RunState != "succeeded":
				errs[i] = fmt.Errorf("runner %s: run %s is %s after its result, want succeeded", r.ID, asg.RunID, res.RunState)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ErrVerify marks a run that did not end as the benchmark expects.
var ErrVerify = errors.New("verification failed")
