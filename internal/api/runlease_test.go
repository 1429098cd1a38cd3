package api_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestRunLease covers GET /v1/run/lease, which a job's supervisor polls with
// the run token to learn renewals without the runner's key.
func TestRunLease(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		e.request("echo", "")
		e.request("echo", "")
		rc := e.runner()
		asg, ref := e.claim(rc)
		asg2, _ := e.claim(rc)
		require.NotNil(t, asg.RunToken)
		tok := asg.RunToken.Token
		lease := func(token, attempt string) (*protocol.RunLease, error) {
			c := &apiclient.Client{BaseURL: e.srv.URL, Token: token, HTTP: e.srv.Client()}
			return c.RunLease(e.ctx(), attempt)
		}
		refused := func(t *testing.T, err error, status int, code string) {
			t.Helper()
			var ae *apiclient.APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, status, ae.Status, ae.Error())
			require.Equal(t, code, ae.Problem.Code)
		}

		t.Run("the attempt's lease, and its renewal", func(t *testing.T) {
			l, err := lease(tok, asg.AttemptID)
			require.NoError(t, err)
			require.Equal(t, asg.AttemptID, l.AttemptID)
			require.Equal(t, "leased", l.State)
			require.True(t, l.ExpiresAt.Equal(asg.Lease.ExpiresAt), "%v, claim said %v", l.ExpiresAt, asg.Lease.ExpiresAt)
			require.InDelta(t, asg.Lease.ExpiresAt.Sub(e.clock.Now()).Milliseconds(), l.RemainingMS, 1000)
			require.Positive(t, l.RemainingMS)
			require.Equal(t, asg.Lease.TTLSeconds, l.TTLSeconds)
			e.clock.Advance(2 * time.Second)
			rr, err := rc.Renew(e.ctx(), ref)
			require.NoError(t, err)
			l2, err := lease(tok, asg.AttemptID)
			require.NoError(t, err)
			require.True(t, l2.ExpiresAt.Equal(rr.ExpiresAt) && l2.ExpiresAt.After(l.ExpiresAt), "%v after renewal to %v", l2.ExpiresAt, rr.ExpiresAt)
		})

		t.Run("no token, an API token, a forged token", func(t *testing.T) {
			parts := strings.Split(tok, ".")
			tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"attempt_id":"`+asg2.AttemptID+`"}`)) + "." + parts[2]
			for name, bad := range map[string]string{"none": "", "api token": "jpt_abc", "garbage": "a.b.c", "tampered": tampered} {
				t.Run(name, func(t *testing.T) {
					_, err := lease(bad, asg.AttemptID)
					refused(t, err, 401, protocol.CodeUnauthorized)
				})
			}
		})

		t.Run("no attempt named", func(t *testing.T) {
			_, err := lease(tok, "")
			refused(t, err, 400, protocol.CodeBadRequest)
		})

		t.Run("another attempt's token", func(t *testing.T) {
			_, err := lease(asg2.RunToken.Token, asg.AttemptID)
			refused(t, err, 403, protocol.CodeForbidden)
			_, err = lease(tok, asg2.AttemptID)
			refused(t, err, 403, protocol.CodeForbidden)
		})

		t.Run("an ended attempt", func(t *testing.T) {
			_, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded"})
			require.NoError(t, err)
			_, err = lease(tok, asg.AttemptID)
			refused(t, err, 410, protocol.CodeAttemptEnded)
		})

		t.Run("an expired lease not yet reaped", func(t *testing.T) {
			_, err := lease(asg2.RunToken.Token, asg2.AttemptID)
			require.NoError(t, err)
			e.clock.Advance(asg2.Lease.ExpiresAt.Sub(e.clock.Now()) + time.Second)
			_, err = lease(asg2.RunToken.Token, asg2.AttemptID)
			if asg2.RunToken.ExpiresAt.After(e.clock.Now()) {
				refused(t, err, 410, protocol.CodeAttemptEnded)
			} else {
				refused(t, err, 401, protocol.CodeUnauthorized)
			}
		})
	})
}
