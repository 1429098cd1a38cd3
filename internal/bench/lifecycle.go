package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// LifecycleWait is the long poll of the lifecycle phase's claims.
const LifecycleWait = 5

// Lifecycle is the outcome of the lifecycle phase.
type Lifecycle struct {
	// Phase counts runs requested, claimed, logged and finished (renewed
	// too with Runner.Renew), from the first request to the last accepted
	// result.
	Phase Phase
	// RequestToClaimed runs from the moment a run's request was sent to the
	// moment its claim was answered (one clock): with runners waiting in long
	// polls, this is the request's own latency plus dispatch latency.
	RequestToClaimed Latency
	ClaimLatency     Latency
	Requested        map[string]struct{}
	Claims           map[string]int
}

// RunLifecycle requests n runs from `clients` callers while every runner
// waits in a long-polling claim; each runner, for each run it gets, sends
// one log chunk and reports success (Runner.finish). It ends when n results
// were accepted.
//
// Paced, one client requests the next run only when the previous one
// finished, so that every request finds the runners idle in their long
// polls: request→claimed is then dispatch latency alone.
func (e *Env) RunLifecycle(ctx context.Context, runners []*Runner, n, clients int, paced bool, done *atomic.Int64) (*Lifecycle, error) {
	if done == nil {
		done = new(atomic.Int64)
	}
	clients = max(min(clients, n), 1)
	if paced {
		clients = 1
	}
	finished := make(chan struct{}, n)
	// Paced, runners mostly wait: a long poll as long as the idle runners'
	// keeps their re-polling out of the measurement.
	wait := LifecycleWait
	if paced {
		wait = IdleWait
	}
	// The claim of a run may be answered before its request is: claim times
	// and request times are kept apart and matched at the end.
	type local struct {
		claimLat  []time.Duration
		claimedAt map[string]time.Time
		answered  map[string]time.Time
		last      time.Time
	}
	locals := make([]local, len(runners)+clients)
	var results atomic.Int64
	g, gctx := newGroup(ctx)
	wctx, stopRunners := context.WithCancel(gctx)
	defer stopRunners()
	start := clock.Real{}.Now()
	for i, r := range runners {
		l := &locals[i]
		l.claimedAt = map[string]time.Time{}
		g.Go(func() error {
			var mu sync.Mutex // guards l when a runner works on several runs at once
			// ended counts k accepted results.
			ended := func(k int) {
				mu.Lock()
				l.last = clock.Real{}.Now()
				mu.Unlock()
				done.Add(int64(k))
				for range k {
					finished <- struct{}{}
				}
				if results.Add(int64(k)) == int64(n) {
					stopRunners()
				}
			}
			work := func(asg *protocol.Assignment, claimed time.Time) error {
				if err := r.finish(gctx, asg, claimed); err != nil {
					return err
				}
				ended(1)
				return nil
			}
			for wctx.Err() == nil {
				t0 := clock.Real{}.Now()
				var asgs []*protocol.Assignment
				var err error
				if e.ClaimMax > 1 {
					asgs, err = r.Client.ClaimMany(wctx, wait, e.ClaimMax, "")
				} else {
					var asg *protocol.Assignment
					if asg, err = r.Client.Claim(wctx, wait, ""); asg != nil {
						asgs = []*protocol.Assignment{asg}
					}
				}
				t1 := clock.Real{}.Now()
				if err != nil {
					if wctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("runner %s: claim: %w", r.ID, err)
				}
				if len(asgs) == 0 {
					continue
				}
				l.claimLat = append(l.claimLat, t1.Sub(t0))
				for _, asg := range asgs {
					l.claimedAt[asg.RunID] = t1
				}
				if r.BatchResults {
					if err := r.finishBatch(gctx, asgs, t1, true); err != nil {
						return err
					}
					ended(len(asgs))
					continue
				}
				if len(asgs) == 1 {
					if err := work(asgs[0], t1); err != nil {
						return err
					}
					continue
				}
				errs := make([]error, len(asgs))
				var wg sync.WaitGroup
				for i, asg := range asgs {
					wg.Go(func() { errs[i] = work(asg, t1) })
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if paced {
		// Requests start once every runner waits on the server, so that the
		// runners' first claims are not part of what is measured.
		if err := e.awaitWaiting(gctx, len(runners)); err != nil {
			return nil, err
		}
	}
	// Paced, every request is a call of its own: dispatch latency is that
	// of one run.
	batch := e.RequestBatch
	if paced {
		batch = 1
	}
	var next atomic.Int64
	for c := range clients {
		l := &locals[len(runners)+c]
		l.answered = map[string]time.Time{}
		g.Go(func() error {
			for {
				k := takeRequests(&next, n, batch)
				if k == 0 {
					break
				}
				t0 := clock.Real{}.Now()
				runs, err := e.request(gctx, k, batch)
				if err != nil {
					return err
				}
				for _, run := range runs {
					l.answered[run.ID] = t0
				}
				if paced {
					select {
					case <-finished:
					case <-gctx.Done():
						return nil
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if results.Load() != int64(n) {
		return nil, errors.New("lifecycle phase ended early")
	}
	out := &Lifecycle{Requested: map[string]struct{}{}, Claims: map[string]int{}}
	answered := map[string]time.Time{}
	var claimLat, r2c []time.Duration
	last := start
	for _, l := range locals {
		claimLat = append(claimLat, l.claimLat...)
		for id, t := range l.answered {
			answered[id] = t
			out.Requested[id] = struct{}{}
		}
		if l.last.After(last) {
			last = l.last
		}
	}
	for _, l := range locals {
		for id, t := range l.claimedAt {
			out.Claims[id]++
			if a, ok := answered[id]; ok {
				r2c = append(r2c, max(t.Sub(a), 0))
			}
		}
	}
	out.Phase = newPhase(n, last.Sub(start))
	out.ClaimLatency = Summarize(claimLat)
	out.RequestToClaimed = Summarize(r2c)
	return out, nil
}

// awaitWaiting waits (up to two minutes) until n claims wait on the server.
func (e *Env) awaitWaiting(ctx context.Context, n int) error {
	deadline := clock.Real{}.Now().Add(2 * time.Minute)
	for e.Server.Control().ClaimsWaiting() < n {
		if !(clock.Real{}).Now().Before(deadline) {
			return fmt.Errorf("only %d of %d runners are waiting in a claim after two minutes", e.Server.Control().ClaimsWaiting(), n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
