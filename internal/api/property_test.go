package api_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// heldLease is what the model knows about a lease a runner was granted.
type heldLease struct {
	runner    int
	ref       apiclient.AttemptRef
	expiresAt time.Time
	deadline  time.Time
	ended     bool
}

// TestLifecycleProperties drives random interleavings of requests, claims,
// renewals, results, relinquishes, cancels, clock moves and reaper passes
// through the real HTTP API, and checks after every step that the server
// never grants what the model says it must not: no attempt is leased twice,
// no expired lease is renewed or completed, no lease outlives its deadline, a
// run has at most one live attempt, and a finished run never changes again.
func TestLifecycleProperties(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		rapid.Check(t, func(rt *rapid.T) {
			runners := []*apiclient.RunnerClient{e.runner(), e.runner()}
			var runs []string
			held := map[string]*heldLease{} // attempt ID → lease
			finished := map[string]string{} // run ID → terminal state seen
			claimed := map[string]bool{}    // attempt IDs ever granted
			fail := func(format string, args ...any) { rt.Fatalf(format, args...) }
			live := func() []*heldLease {
				var out []*heldLease
				for _, h := range held {
					if !h.ended {
						out = append(out, h)
					}
				}
				return out
			}
			checkRun := func(id string) {
				r, err := e.admin.GetRun(e.ctx(), id)
				if err != nil {
					fail("get run: %v", err)
				}
				if prev, ok := finished[id]; ok && prev != r.State {
					fail("run %s changed from %s to %s after it ended", id, prev, r.State)
				}
				liveAtt := 0
				for i, a := range r.Attempts {
					if a.Number != i+1 {
						fail("run %s attempt numbers not contiguous", id)
					}
					if a.State == "queued" || a.State == "leased" {
						liveAtt++
						if i != len(r.Attempts)-1 {
							fail("run %s: live attempt %d is not the last", id, a.Number)
						}
					}
					if a.LeaseExpiresAt != nil && a.Deadline != nil && a.LeaseExpiresAt.After(*a.Deadline) {
						fail("attempt %s lease %s past deadline %s", a.ID, a.LeaseExpiresAt, a.Deadline)
					}
				}
				if liveAtt > 1 {
					fail("run %s has %d live attempts", id, liveAtt)
				}
				switch r.State {
				case "succeeded", "failed", "cancelled", "timed_out":
					finished[id] = r.State
					if liveAtt != 0 {
						fail("finished run %s has a live attempt", id)
					}
				case "queued", "running":
					if liveAtt != 1 {
						fail("%s run %s has %d live attempts", r.State, id, liveAtt)
					}
				}
			}
			rt.Repeat(map[string]func(*rapid.T){
				"request": func(rt *rapid.T) {
					if len(runs) >= 4 {
						rt.Skip("enough runs")
					}
					job := rapid.SampledFrom([]string{"echo", "flaky"}).Draw(rt, "job")
					runs = append(runs, e.request(job, "").ID)
				},
				"claim": func(rt *rapid.T) {
					i := rapid.IntRange(0, 1).Draw(rt, "runner")
					asg, err := runners[i].Claim(e.ctx(), 0, "")
					if err != nil {
						fail("claim: %v", err)
					}
					if asg == nil {
						return
					}
					if claimed[asg.AttemptID] {
						fail("attempt %s granted twice", asg.AttemptID)
					}
					claimed[asg.AttemptID] = true
					held[asg.AttemptID] = &heldLease{runner: i, expiresAt: asg.Lease.ExpiresAt, deadline: asg.Lease.Deadline,
						ref: apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}}
				},
				"renew": func(rt *rapid.T) {
					ls := live()
					if len(ls) == 0 {
						rt.Skip("nothing held")
					}
					h := rapid.SampledFrom(ls).Draw(rt, "lease")
					now := e.clock.Now()
					resp, err := runners[h.runner].Renew(e.ctx(), h.ref)
					switch {
					case err == nil:
						if !now.Before(h.expiresAt) {
							fail("renewed an expired lease (now %s, expired %s)", now, h.expiresAt)
						}
						if resp.ExpiresAt.After(h.deadline) {
							fail("renewal past deadline")
						}
						h.expiresAt = resp.ExpiresAt
					case apiclient.IsCode(err, protocol.CodeLeaseExpired):
						if now.Before(h.expiresAt) {
							fail("live lease refused as expired: %v", err)
						}
						h.ended = true
					default:
						fail("renew: %v", err)
					}
				},
				"result": func(rt *rapid.T) {
					ls := live()
					if len(ls) == 0 {
						rt.Skip("nothing held")
					}
					h := rapid.SampledFrom(ls).Draw(rt, "lease")
					outcome := rapid.SampledFrom([]string{"succeeded", "failed"}).Draw(rt, "outcome")
					now := e.clock.Now()
					_, err := runners[h.runner].Result(e.ctx(), h.ref, protocol.ResultRequest{Outcome: outcome, Summary: outcome})
					switch {
					case err == nil:
						if !now.Before(h.expiresAt) {
							fail("result accepted on an expired lease")
						}
					case apiclient.IsCode(err, protocol.CodeLeaseExpired):
						if now.Before(h.expiresAt) {
							fail("live lease refused as expired: %v", err)
						}
					default:
						fail("result: %v", err)
					}
					h.ended = true
				},
				"relinquish": func(rt *rapid.T) {
					ls := live()
					if len(ls) == 0 {
						rt.Skip("nothing held")
					}
					h := rapid.SampledFrom(ls).Draw(rt, "lease")
					err := runners[h.runner].Relinquish(e.ctx(), h.ref, "test")
					if err != nil && !apiclient.IsCode(err, protocol.CodeLeaseExpired) {
						fail("relinquish: %v", err)
					}
					h.ended = true
				},
				"cancel": func(rt *rapid.T) {
					if len(runs) == 0 {
						rt.Skip("no runs")
					}
					id := rapid.SampledFrom(runs).Draw(rt, "run")
					_, err := e.admin.CancelRun(e.ctx(), id)
					if err != nil && !apiclient.IsCode(err, protocol.CodeInvalidState) {
						fail("cancel: %v", err)
					}
				},
				"advance": func(rt *rapid.T) {
					e.clock.Advance(time.Duration(rapid.IntRange(1, 35000).Draw(rt, "ms")) * time.Millisecond)
				},
				"reap": func(rt *rapid.T) {
					if _, err := e.svc.Reap(e.ctx()); err != nil {
						fail("reap: %v", err)
					}
				},
				"": func(rt *rapid.T) {
					for _, id := range runs {
						checkRun(id)
					}
				},
			})
			// Leave no live work for the next iteration's runners.
			for _, id := range runs {
				_, _ = e.admin.CancelRun(e.ctx(), id)
			}
			e.clock.Advance(time.Hour)
			if _, err := e.svc.Reap(e.ctx()); err != nil {
				fail("final reap: %v", err)
			}
			for _, id := range runs {
				checkRun(id)
				if _, ok := finished[id]; !ok {
					fail("run %s did not end: %s", id, fmt.Sprint(finished))
				}
			}
		})
	})
}
