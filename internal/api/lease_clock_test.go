package api_test

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// offsetClock is a runner's clock that is off by a fixed amount.
type offsetClock struct {
	clock.Clock
	off time.Duration
}

func (c offsetClock) Now() time.Time { return c.Clock.Now().Add(c.off) }
func (c offsetClock) NowOrNil() *time.Time {
	t := c.Now()
	return &t
}

// TestL5_RunnerClockOffset (acceptance case L5, server side): a runner whose
// clock is 10 minutes off either way is first refused for timestamp skew
// with the server's time in the answer, corrects its signatures and works;
// the lease it holds is decided by the server's clock alone: its expiry is
// server time + TTL, it is not taken over a moment before that (however
// the holder's clock reads), and it is right after.
func TestL5_RunnerClockOffset(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, leaseDefinitions)
		for _, off := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
			holder := e.runner()
			holder.Clock = offsetClock{e.clock, off}
			other := e.runner()

			// Its first signed call is refused for skew; the client corrects
			// its stamps from the answer and the retry passes.
			_, err := (&apiclient.RunnerClient{BaseURL: holder.BaseURL, RunnerID: holder.RunnerID, Key: holder.Key,
				HTTP: holder.HTTP, Clock: offsetClock{e.clock, off}}).Heartbeat(e.ctx(), protocol.HeartbeatRequest{Status: "idle"})
			require.NoError(t, err, "the client corrects itself from the refusal")

			run := e.request("migrate", "")
			claimed := e.clock.Now()
			asg, ref := e.claim(holder)
			require.Equal(t, run.ID, asg.RunID)
			require.WithinDuration(t, claimed.Add(10*time.Second), asg.Lease.ExpiresAt, time.Second,
				"the expiry is the server's time + TTL, whatever the holder's clock says")

			second := e.request("migrate", "")
			e.clock.Advance(9 * time.Second)
			_, err = e.svc.Reap(e.ctx())
			require.NoError(t, err)
			got, err := other.Claim(e.ctx(), 0, "")
			require.NoError(t, err)
			require.Nil(t, got, "the key must not be taken over before it expires")
			_, err = holder.Renew(e.ctx(), ref)
			require.NoError(t, err, "the holder renews in time by the server's clock")

			e.clock.Advance(11 * time.Second)
			_, err = e.svc.Reap(e.ctx())
			require.NoError(t, err)
			got, err = other.Claim(e.ctx(), 0, "")
			require.NoError(t, err)
			require.NotNil(t, got, "after the server's expiry the key is free")
			require.Equal(t, second.ID, got.RunID)
			_, err = holder.Renew(e.ctx(), ref)
			require.True(t, apiclient.IsCode(err, protocol.CodeLeaseExpired) || apiclient.IsCode(err, protocol.CodeAttemptStale), "late renew: %v", err)
			_, err = other.Result(e.ctx(), apiclient.AttemptRef{RunID: got.RunID, AttemptID: got.AttemptID, LeaseToken: got.Lease.Token},
				protocol.ResultRequest{Outcome: "succeeded", RequestID: "done-" + got.AttemptID})
			require.NoError(t, err)
		}
	})
}

// TestTimestampSkewAnswerCarriesServerTime: the refusal names the server's
// clock, and only for a request whose signature verified.
func TestTimestampSkewAnswerCarriesServerTime(t *testing.T) {
	t.Parallel()
	e := newEnvFiles(t, testdb.SQLite(t), leaseDefinitions)
	rc := e.runner()
	problem := func(r rawSigned) protocol.Problem {
		resp, err := e.srv.Client().Do(e.signedRequest(r))
		require.NoError(t, err)
		defer resp.Body.Close()
		var p protocol.Problem
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		require.Equal(t, 401, resp.StatusCode)
		return p
	}
	r := rawSigned{Runner: rc.RunnerID, Key: rc.Key, Path: "/v1/runner/heartbeat", Body: []byte(`{"status":"idle"}`), Timestamp: "1000"}
	p := problem(r)
	require.Equal(t, protocol.CodeTimestampSkew, p.Code)
	require.Equal(t, e.clock.Now().Unix(), p.ServerTime)

	_, stranger, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	r.Key = stranger
	p = problem(r)
	require.Equal(t, protocol.CodeSignatureInvalid, p.Code)
	require.Zero(t, p.ServerTime, "an unverified request learns nothing")
}
