package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestDeferredNonceReplays: the claim, renew, log and result routes record
// their nonce in their own first transaction (authn.VerifyRunnerDeferred).
// A replay of each is still refused, and has no effect: a replayed claim
// does not rotate the lease it handed out, a request the route refused
// (invalid, stale, nothing to claim) cannot be replayed either, and of many
// copies of a result exactly one is accepted.
func TestDeferredNonceReplays(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		rc := e.runner()
		replayed := func(r rawSigned, wantFirst int) []byte {
			t.Helper()
			r.Nonce = apiclient.NewNonce()
			code, body := sendBody(t, e, e.signedRequest(r))
			require.Equal(t, wantFirst, code, "%s: first copy: %s", r.Path, body)
			code, pc := e.send(e.signedRequest(r))
			require.Equal(t, http.StatusUnauthorized, code, r.Path)
			require.Equal(t, protocol.CodeNonceReused, pc, r.Path)
			return body
		}

		// Nothing to claim, then a claim that goes through reclaim's
		// transaction (a request ID) before the group committer's.
		replayed(rawSigned{Path: "/v1/runner/claim", Body: []byte(`{"wait_seconds":0}`), Runner: rc.RunnerID, Key: rc.Key}, http.StatusNoContent)
		e.request("echo", "")
		body := replayed(rawSigned{Path: "/v1/runner/claim", Body: []byte(`{"wait_seconds":0,"request_id":"claim-1"}`), Runner: rc.RunnerID, Key: rc.Key}, http.StatusOK)
		var asg protocol.Assignment
		require.NoError(t, json.Unmarshal(body, &asg))
		attempt := func(path, body string) rawSigned {
			return rawSigned{Path: path, Body: []byte(body), Runner: rc.RunnerID, Key: rc.Key,
				Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token}
		}
		// The replayed claim rotated nothing: the first answer's lease
		// still renews.
		replayed(attempt("/v1/runner/attempt/renew", `{}`), http.StatusOK)
		replayed(attempt("/v1/runner/attempt/logs", `{"seq":0,"lines":[{"stream":"stdout","text":"hi"}]}`), http.StatusNoContent)
		// Refused by the route, before or inside its transaction.
		replayed(attempt("/v1/runner/attempt/result", `{"outcome":"maybe"}`), http.StatusBadRequest)
		stale := attempt("/v1/runner/attempt/renew", `{}`)
		stale.Lease = "not-the-lease"
		replayed(stale, http.StatusConflict)

		// Fifty copies of one result: one is accepted, the others are
		// replays, whether they share its group transaction or not.
		r := attempt("/v1/runner/attempt/result", `{"outcome":"succeeded","exit_code":0,"logs":{"seq":1,"lines":[{"stream":"stdout","text":"bye"}]}}`)
		r.Nonce = apiclient.NewNonce()
		got := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 50 {
			req := e.signedRequest(r)
			wg.Go(func() {
				code, _ := e.send(req)
				mu.Lock()
				got[code]++
				mu.Unlock()
			})
		}
		wg.Wait()
		require.Equal(t, map[int]int{200: 1, 401: 49}, got)
		require.Equal(t, "succeeded", e.run(asg.RunID).State)
	})
}

func sendBody(t *testing.T, e *testEnv, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}
