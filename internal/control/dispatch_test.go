package control

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestLongPollBurst: runs requested while runners wait in long polls are
// handed out, each to exactly one waiter, through the claim lines (only the
// head watches; each successful claimer pokes the next), and the other
// waiters keep waiting. Both stores, two control planes (replicas): the
// runners wait on one, the runs are requested on the other.
func TestLongPollBurst(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, jobSpec(time.Minute, time.Hour, 1))
		ctx, cancel := context.WithCancel(e.ctx())
		defer cancel()
		const waiters, runs = 12, 5
		type got struct {
			asg *protocol.Assignment
			err error
		}
		out := make(chan got, waiters)
		for i := range waiters {
			r := e.runner(fmt.Sprintf("w%d", i))
			go func() {
				asg, err := e.a.Claim(ctx, call(r, nil), &protocol.ClaimRequest{WaitSeconds: 25})
				out <- got{asg, err}
			}()
		}
		require.Eventually(t, func() bool { return e.a.ClaimsWaiting() == waiters }, 20*time.Second, 5*time.Millisecond)
		want := map[string]bool{}
		for range runs {
			v, created, err := e.b.RequestRun(e.ctx(), e.actor, &protocol.RunRequest{Job: testJob, Channel: "prod"})
			require.NoError(t, err)
			require.True(t, created)
			want[v.Run.ID] = true
		}
		seen := map[string]bool{}
		for range runs {
			g := <-out
			require.NoError(t, g.err)
			require.NotNil(t, g.asg, "a waiter returned without an assignment while runs were queued")
			require.True(t, want[g.asg.RunID], "unexpected run %s", g.asg.RunID)
			require.False(t, seen[g.asg.RunID], "run %s handed out twice", g.asg.RunID)
			seen[g.asg.RunID] = true
		}
		require.Eventually(t, func() bool { return e.a.ClaimsWaiting() == waiters-runs }, 20*time.Second, 5*time.Millisecond)
		cancel()
		for range waiters - runs {
			g := <-out
			require.NoError(t, g.err)
			require.Nil(t, g.asg, "a waiter got an assignment after every run was handed out")
		}
		require.Equal(t, 0, e.a.ClaimsWaiting())
	})
}
