package api_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// POST /v1/runner/results records several results in one signed call, each
// item as POST /v1/runner/attempt/result would: an item that call would
// refuse is refused alone and the others are recorded; an invalid item
// refuses the whole call and nothing is recorded.
func TestResultsBatch(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		a, b := e.runner(), e.runner()
		for range 4 {
			e.request("echo", "")
		}
		asgs, err := a.ClaimMany(e.ctx(), 0, 4, "")
		require.NoError(t, err)
		require.Len(t, asgs, 4)
		refs := make([]apiclient.AttemptRef, len(asgs))
		for i, asg := range asgs {
			refs[i] = apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}
		}
		theirs := e.request("echo", "")
		_, bref := e.claim(b)
		require.Equal(t, theirs.ID, bref.RunID)

		ok := protocol.ResultRequest{Outcome: "succeeded", Summary: "done",
			Logs: &protocol.LogsRequest{Seq: 0, Lines: []protocol.LogLine{{Stream: "stdout", Text: "last line"}}}}
		failed := protocol.ResultRequest{Outcome: "failed", ExitCode: 3}
		forged := refs[2]
		forged.LeaseToken = "not-the-lease"
		items := []apiclient.ResultItem{
			{Ref: refs[0], Result: ok},
			{Ref: refs[1], Result: failed},
			{Ref: forged, Result: ok},
			{Ref: bref, Result: ok}, // another runner's live lease, its own token
			{Ref: refs[3], Result: ok},
		}
		answers, err := a.Results(e.ctx(), items)
		require.NoError(t, err)
		require.Len(t, answers, 5)
		code := func(err error) string {
			t.Helper()
			var ae *apiclient.APIError
			require.True(t, errors.As(err, &ae), "got %v", err)
			return ae.Problem.Code
		}
		require.NoError(t, answers[0].Err)
		require.Equal(t, "succeeded", answers[0].RunState)
		require.NoError(t, answers[1].Err)
		require.Equal(t, e.run(refs[1].RunID).State, answers[1].RunState)
		require.Equal(t, protocol.CodeAttemptStale, code(answers[2].Err))
		require.Equal(t, protocol.CodeAttemptStale, code(answers[3].Err))
		require.NoError(t, answers[4].Err)

		require.Equal(t, "succeeded", e.run(refs[0].RunID).State)
		r1 := e.run(refs[1].RunID)
		require.Equal(t, "failed", r1.Attempts[0].State)
		require.Equal(t, "running", e.run(refs[2].RunID).State, "a refused item records nothing")
		require.Equal(t, "running", e.run(bref.RunID).State, "another runner's attempt is not ended by this one")
		require.Equal(t, "succeeded", e.run(refs[3].RunID).State)
		logs, err := e.admin.Logs(e.ctx(), refs[0].RunID, 0)
		require.NoError(t, err)
		require.Len(t, logs.Lines, 1)
		require.Equal(t, "last line", logs.Lines[0].Text)

		// The answer was lost: the same items again are acknowledged, and
		// the chunk is not stored twice. A different result is a conflict.
		again, err := a.Results(e.ctx(), []apiclient.ResultItem{items[0], items[1], {Ref: refs[3], Result: failed}})
		require.NoError(t, err)
		require.NoError(t, again[0].Err)
		require.Equal(t, "succeeded", again[0].RunState)
		require.NoError(t, again[1].Err)
		require.Equal(t, protocol.CodeResultConflict, code(again[2].Err))
		logs, err = e.admin.Logs(e.ctx(), refs[0].RunID, 0)
		require.NoError(t, err)
		require.Len(t, logs.Lines, 1)

		// Invalid items refuse the whole call, naming the item; the valid
		// item beside them is not recorded.
		whole := func(items []apiclient.ResultItem, field string) {
			t.Helper()
			_, err := a.Results(e.ctx(), items)
			var ae *apiclient.APIError
			require.True(t, errors.As(err, &ae), "got %v", err)
			require.Equal(t, http.StatusBadRequest, ae.Status)
			require.Equal(t, protocol.CodeBadRequest, ae.Problem.Code)
			require.Equal(t, field, ae.Problem.Field)
			require.Equal(t, "running", e.run(refs[2].RunID).State)
		}
		whole([]apiclient.ResultItem{{Ref: refs[2], Result: ok}, {Ref: refs[2], Result: ok}}, "results[1].attempt_id")
		whole([]apiclient.ResultItem{{Ref: refs[2], Result: ok}, {Ref: bref, Result: protocol.ResultRequest{Outcome: "done"}}}, "results[1]")
		whole([]apiclient.ResultItem{{Ref: refs[2], Result: protocol.ResultRequest{Outcome: "succeeded",
			Logs: &protocol.LogsRequest{Lines: []protocol.LogLine{{Stream: "video"}}}}}}, "results[0].logs.lines[0].stream")
		whole([]apiclient.ResultItem{{Ref: apiclient.AttemptRef{AttemptID: refs[2].AttemptID}, Result: ok}}, "results[0]")

		raw := func(body string, r rawSigned) (int, string) {
			t.Helper()
			r.Path, r.Body, r.Runner, r.Key = "/v1/runner/results", []byte(body), a.RunnerID, a.Key
			return e.send(e.signedRequest(r))
		}
		item := func(ref apiclient.AttemptRef) string {
			return fmt.Sprintf(`{"run_id":%q,"attempt_id":%q,"lease_token":%q,"outcome":"succeeded"}`, ref.RunID, ref.AttemptID, ref.LeaseToken)
		}
		for name, body := range map[string]string{
			"no items":           `{"results":[]}`,
			"too many":           `{"results":[` + strings.TrimSuffix(strings.Repeat(item(refs[2])+",", protocol.MaxResultsBatch+1), ",") + `]}`,
			"unknown field":      `{"results":[` + item(refs[2]) + `],"extra":1}`,
			"unknown item field": `{"results":[` + strings.TrimSuffix(item(refs[2]), "}") + `,"tenant":"x"}]}`,
		} {
			status, pc := raw(body, rawSigned{})
			require.Equal(t, http.StatusBadRequest, status, name)
			require.Equal(t, protocol.CodeBadRequest, pc, name)
		}
		// The call names no attempt of its own: attempt headers are refused,
		// not ignored.
		status, pc := raw(`{"results":[`+item(refs[2])+`]}`, rawSigned{Run: refs[2].RunID, Attempt: refs[2].AttemptID, Lease: refs[2].LeaseToken})
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, protocol.CodeBadRequest, pc)
		require.Equal(t, "running", e.run(refs[2].RunID).State)

		// A replayed batch is refused and has no effect of its own.
		nonce := apiclient.NewNonce()
		status, _ = raw(`{"results":[`+item(refs[2])+`]}`, rawSigned{Nonce: nonce})
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "succeeded", e.run(refs[2].RunID).State)
		status, pc = raw(`{"results":[`+item(refs[2])+`]}`, rawSigned{Nonce: nonce})
		require.Equal(t, http.StatusUnauthorized, status)
		require.Equal(t, protocol.CodeNonceReused, pc)

		// A lease past its expiry is refused for its item.
		e.clock.Advance(31 * time.Second)
		late, err := b.Results(e.ctx(), []apiclient.ResultItem{{Ref: bref, Result: ok}})
		require.NoError(t, err)
		require.Equal(t, protocol.CodeLeaseExpired, code(late[0].Err))

		// Each accepted item is audited as its own result.
		ev, err := e.admin.Audit(e.ctx(), 0, 1000)
		require.NoError(t, err)
		ended := map[string]int{}
		for _, x := range ev.Events {
			if strings.HasPrefix(x.Action, "attempt.") && x.Action != "attempt.claimed" {
				ended[x.Subject]++
			}
		}
		require.Equal(t, map[string]int{refs[0].RunID: 1, refs[1].RunID: 1, refs[2].RunID: 1, refs[3].RunID: 1}, ended)
	})
}

// Two items of one run (its ended attempt, repeated, and its live one):
// each item sees the run as the items before it left it, as separate calls
// would.
func TestResultsBatchSameRun(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		run := e.request("flaky", "")
		rc := e.runner()
		_, first := e.claim(rc)
		failed := protocol.ResultRequest{Outcome: "failed", ExitCode: 1}
		res, err := rc.Result(e.ctx(), first, failed)
		require.NoError(t, err)
		require.Equal(t, "queued", res.RunState, "retried")
		e.clock.Advance(6 * time.Second) // the retry's backoff
		_, second := e.claim(rc)
		require.Equal(t, run.ID, second.RunID)
		require.NotEqual(t, first.AttemptID, second.AttemptID)

		answers, err := rc.Results(e.ctx(), []apiclient.ResultItem{
			{Ref: second, Result: protocol.ResultRequest{Outcome: "succeeded"}},
			{Ref: first, Result: failed}, // its result again: acknowledged
		})
		require.NoError(t, err)
		require.NoError(t, answers[0].Err)
		require.Equal(t, "succeeded", answers[0].RunState)
		require.NoError(t, answers[1].Err)
		require.Equal(t, "succeeded", answers[1].RunState, "the run as the item before left it")
		require.Equal(t, "succeeded", e.run(run.ID).State)
	})
}
