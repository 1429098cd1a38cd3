package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// A claim with "max" hands out several attempts, each with its own lease;
// one without it is answered as always.
func TestClaimBatch(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		var runs []string
		for range 3 {
			runs = append(runs, e.request("echo", `{"message":"x"}`).ID)
		}
		rc := e.runner()
		asgs, err := rc.ClaimMany(e.ctx(), 0, 2, "")
		require.NoError(t, err)
		require.Len(t, asgs, 2)
		require.NotEqual(t, asgs[0].Lease.Token, asgs[1].Lease.Token)

		// The old form still gets one assignment object.
		one, _ := e.claim(rc)
		require.ElementsMatch(t, runs, []string{asgs[0].RunID, asgs[1].RunID, one.RunID}, "each run handed out once")
		none, err := rc.ClaimMany(e.ctx(), 0, 5, "")
		require.NoError(t, err)
		require.Empty(t, none, "nothing left: 204")

		// Each lease is the runner's own: renew, report and finish them.
		for _, a := range asgs {
			ref := apiclient.AttemptRef{RunID: a.RunID, AttemptID: a.AttemptID, LeaseToken: a.Lease.Token}
			_, err := rc.Renew(e.ctx(), ref)
			require.NoError(t, err)
			res, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded"})
			require.NoError(t, err)
			require.Equal(t, "succeeded", res.RunState)
		}
		// Another runner cannot use them.
		other := e.runner()
		_, err = other.Renew(e.ctx(), apiclient.AttemptRef{RunID: one.RunID, AttemptID: one.AttemptID, LeaseToken: one.Lease.Token})
		require.True(t, apiclient.IsCode(err, protocol.CodeAttemptStale), "got %v", err)

		// Each run was claimed once, by this runner.
		for _, id := range runs {
			got := e.run(id)
			require.Len(t, got.Attempts, 1)
			require.Equal(t, rc.RunnerID, got.Attempts[0].Runner)
		}
	})
}

// A claim batch retried with the same request_id (its answer was lost) gets
// the same attempts again with new lease tokens, not new attempts.
func TestClaimBatchRetrySameRequestID(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		for range 4 {
			e.request("echo", `{"message":"x"}`)
		}
		rc := e.runner()
		first, err := rc.ClaimMany(e.ctx(), 0, 3, "batch-1")
		require.NoError(t, err)
		require.Len(t, first, 3)
		again, err := rc.ClaimMany(e.ctx(), 0, 3, "batch-1")
		require.NoError(t, err)
		require.Len(t, again, 3)
		for i := range first {
			require.Equal(t, first[i].AttemptID, again[i].AttemptID)
			require.NotEqual(t, first[i].Lease.Token, again[i].Lease.Token, "tokens rotate: only digests are stored")
			// The lost answer's token no longer works; the new one does.
			_, err := rc.Renew(e.ctx(), apiclient.AttemptRef{RunID: first[i].RunID, AttemptID: first[i].AttemptID, LeaseToken: first[i].Lease.Token})
			require.True(t, apiclient.IsCode(err, protocol.CodeAttemptStale), "got %v", err)
			_, err = rc.Renew(e.ctx(), apiclient.AttemptRef{RunID: again[i].RunID, AttemptID: again[i].AttemptID, LeaseToken: again[i].Lease.Token})
			require.NoError(t, err)
		}
		// A new request ID gets the remaining run.
		rest, err := rc.ClaimMany(e.ctx(), 0, 3, "batch-2")
		require.NoError(t, err)
		require.Len(t, rest, 1)
	})
}

// max outside 1..32 is refused with bad_request before anything is claimed.
func TestClaimBatchBadMax(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		e.request("echo", `{"message":"x"}`)
		rc := e.runner()
		for _, body := range []string{`{"max":-1}`, `{"max":33}`, `{"max":"2"}`} {
			code, problem := e.send(e.signedRequest(rawSigned{Path: "/v1/runner/claim", Body: []byte(body), Runner: rc.RunnerID, Key: rc.Key}))
			require.Equal(t, http.StatusBadRequest, code, body)
			require.Equal(t, protocol.CodeBadRequest, problem, body)
		}
		code, _ := e.send(e.signedRequest(rawSigned{Path: "/v1/runner/claim", Body: []byte(`{"max":0}`), Runner: rc.RunnerID, Key: rc.Key}))
		require.Equal(t, http.StatusOK, code, "max 0 is the one-attempt form")
		_, err := rc.ClaimMany(e.ctx(), 0, protocol.MaxClaimBatch+1, "")
		require.Error(t, err, "the client refuses too")
	})
}

// A claim of several whose middle attempt may not go (its lease key is
// taken by the attempt before it in the same claim) hands out the others,
// leaves that one queued, blocked on the key, and leaks nothing: the
// attempt is not leased to the runner, and a retry of the lost answer
// finds exactly what was handed out.
func TestClaimBatchSkipsBlockedAttempt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, leaseDefinitions)
		first := e.requestP("migrate", `{}`)
		e.clock.Advance(time.Millisecond)
		second := e.requestP("migrate", `{}`) // same key: waits for the first
		e.clock.Advance(time.Millisecond)
		third := e.requestP("backfill", `{"account":"1"}`)
		rc := e.runner()
		asgs, err := rc.ClaimMany(e.ctx(), 0, 3, "lost-answer")
		require.NoError(t, err)
		var got []string
		for _, a := range asgs {
			got = append(got, a.RunID)
		}
		require.ElementsMatch(t, []string{first.ID, third.ID}, got)

		blocked := e.run(second.ID)
		require.Equal(t, "queued", blocked.State)
		require.Len(t, blocked.Attempts, 1)
		require.Equal(t, "queued", blocked.Attempts[0].State)
		require.Empty(t, blocked.Attempts[0].Runner, "the blocked attempt is not the runner's")

		again, err := rc.ClaimMany(e.ctx(), 0, 3, "lost-answer")
		require.NoError(t, err)
		got = got[:0]
		for _, a := range again {
			got = append(got, a.RunID)
		}
		require.ElementsMatch(t, []string{first.ID, third.ID}, got, "the retry gets what was handed out, nothing else")

		// Once the first ends, the second is claimable.
		for _, a := range again {
			if a.RunID != first.ID {
				continue
			}
			_, err := rc.Result(e.ctx(), apiclient.AttemptRef{RunID: a.RunID, AttemptID: a.AttemptID, LeaseToken: a.Lease.Token}, protocol.ResultRequest{Outcome: "succeeded"})
			require.NoError(t, err)
		}
		next, err := rc.ClaimMany(e.ctx(), 0, 3, "")
		require.NoError(t, err)
		require.Len(t, next, 1)
		require.Equal(t, second.ID, next[0].RunID)
	})
}
