package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestBusyScopeDoesNotStarveAnother: while one tenant (or one pool of a
// tenant) keeps every runner it has busy with a backlog, a run requested in
// another tenant (or pool) goes to that scope's waiting runner at once, not
// after the backlog. "At once" is counted in the busy scope's progress, not
// in time: between the quiet run's request and its claim the busy runners
// may claim at most half of their backlog. A dispatcher that handed out
// work in one order across scopes (oldest first, or busiest first) would
// make the quiet runner wait for the whole backlog; claim lines, claims
// and the group commit are per call and per scope, which is what this
// holds them to. Both stores.
func TestBusyScopeDoesNotStarveAnother(t *testing.T) {
	const backlog = 1200
	testdb.Each(t, func(t *testing.T, st store.Store) {
		for _, tc := range []struct {
			name                   string
			quietTenant, quietPool string
		}{
			{"tenant", "tnt_quiet", "busy"},
			{"pool", testTenant, "quiet"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				busyJob, quietJob := leaseJob("busy", "busy", time.Hour), leaseJob("quiet", tc.quietPool, time.Hour)
				if tc.quietPool == "busy" {
					quietJob = busyJob
				}
				e := newLeaseEnv(t, st, busyJob, quietJob)
				quietActor := principal.Actor{TenantID: tc.quietTenant, Name: "bob", Kind: "user", Admin: true}

				reqs := make([]protocol.RunRequest, protocol.MaxRunBatch)
				for i := range reqs {
					reqs[i] = protocol.RunRequest{Job: "busy", Channel: "prod"}
				}
				for queued := 0; queued < backlog; queued += len(reqs) {
					outs, err := e.a.RequestRuns(e.ctx(), e.actor, reqs)
					require.NoError(t, err)
					for _, o := range outs {
						require.NoError(t, o.Err)
					}
				}

				ctx, cancel := context.WithCancel(e.ctx())
				defer cancel()
				var claimed atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, 8)
				for i := range 4 {
					r := e.runnerOf(testTenant, "busy", fmt.Sprintf("busy-%d", i))
					wg.Go(func() {
						if err := workBacklog(ctx, e.a, r, &claimed); err != nil && !errors.Is(err, context.Canceled) {
							errs <- err
						}
					})
				}
				require.Eventually(t, func() bool { return claimed.Load() >= 64 }, time.Minute, time.Millisecond,
					"the busy runners claimed nothing")

				quiet := e.runnerOf(tc.quietTenant, tc.quietPool, "quiet")
				got := make(chan *protocol.Assignment, 1)
				go func() {
					asg, err := e.b.Claim(ctx, call(quiet, nil), &protocol.ClaimRequest{WaitSeconds: 25})
					if err != nil {
						errs <- err
					}
					got <- asg
				}()
				require.Eventually(t, func() bool { return e.b.ClaimsWaiting() == 1 }, time.Minute, time.Millisecond)
				v, created, err := e.a.RequestRun(e.ctx(), quietActor, &protocol.RunRequest{Job: quietJob.Name, Channel: "prod"})
				require.NoError(t, err)
				require.True(t, created)
				before := claimed.Load()
				asg := <-got
				after := claimed.Load()
				cancel()
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				require.NotNil(t, asg, "the quiet runner's long poll ended without its run")
				require.Equal(t, v.Run.ID, asg.RunID)
				require.Less(t, before, int64(backlog), "the backlog was worked off before the quiet run was requested: make it longer")
				t.Logf("the busy runners claimed %d of %d runs between the quiet run's request and its claim", after-before, backlog)
				require.LessOrEqual(t, after-before, int64(backlog/2),
					"the quiet %s's run waited behind the busy one's backlog", tc.name)
			})
		}
	})
}

// workBacklog claims up to 32 attempts at a time as runner r and reports
// them succeeded, counting the claims, until ctx ends.
func workBacklog(ctx context.Context, s *Service, r *store.Runner, claimed *atomic.Int64) error {
	for {
		asgs, err := s.ClaimBatch(ctx, call(r, nil), &protocol.ClaimRequest{Max: protocol.MaxClaimBatch, WaitSeconds: 1})
		if err != nil {
			return err
		}
		claimed.Add(int64(len(asgs)))
		if len(asgs) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		items := make([]protocol.ResultItem, len(asgs))
		for i, a := range asgs {
			items[i] = protocol.ResultItem{RunID: a.RunID, AttemptID: a.AttemptID, LeaseToken: a.Lease.Token, ResultRequest: *succeeded()}
		}
		outs, err := s.Results(ctx, call(r, nil), &protocol.ResultsRequest{Results: items})
		if err != nil {
			return err
		}
		for _, o := range outs {
			if o.Err != nil {
				return o.Err
			}
		}
	}
}
