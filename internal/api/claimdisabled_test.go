package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// A runner disabled while its claim long-polls is not handed the attempt
// that wakes the claim: the claim is refused with runner_disabled and the
// run stays queued for another runner.
func TestClaimLongPollOfDisabledRunner(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		for _, batch := range []bool{false, true} {
			name := "one"
			if batch {
				name = "batch"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, st)
				rc := e.runner()
				answered := waitingClaim(rc, 10, batch)
				// Let the claim pass authentication and start waiting.
				time.Sleep(700 * time.Millisecond)
				require.NoError(t, e.admin.DisableRunner(e.ctx(), rc.RunnerID))
				run := e.request("echo", "")
				got := answered(t)
				require.Zero(t, got.n, "a disabled runner was handed an attempt")
				require.True(t, apiclient.IsCode(got.err, protocol.CodeRunnerDisabled), "got %v", got.err)
				r := e.run(run.ID)
				require.Equal(t, "queued", r.State)
				for _, a := range r.Attempts {
					require.NotEqual(t, rc.RunnerID, a.Runner, "attempt %s went to the disabled runner", a.ID)
				}
				// Another runner gets it.
				other := e.runner()
				asg, _ := e.claim(other)
				require.Equal(t, run.ID, asg.RunID)
			})
		}
	})
}

// waitingClaim starts a claim of rc that long-polls for up to wait seconds
// (a batch claim of up to 3 with batch) and returns a function that waits
// for its answer: how many attempts it was handed, and its error.
func waitingClaim(rc *apiclient.RunnerClient, wait int, batch bool) func(*testing.T) claimAnswer {
	done := make(chan claimAnswer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if batch {
			asgs, err := rc.ClaimMany(ctx, wait, 3, "")
			done <- claimAnswer{len(asgs), err}
			return
		}
		asg, err := rc.Claim(ctx, wait, "")
		n := 0
		if asg != nil {
			n = 1
		}
		done <- claimAnswer{n, err}
	}()
	return func(t *testing.T) claimAnswer {
		t.Helper()
		select {
		case got := <-done:
			return got
		case <-time.After(15 * time.Second):
			t.Fatal("the waiting claim did not return")
			return claimAnswer{}
		}
	}
}

type claimAnswer struct {
	n   int
	err error
}
