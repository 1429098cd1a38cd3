package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var batchFiles = func() map[string]string {
	f := maps.Clone(testDefinitions)
	f["jobs/deploy.yaml"] = "name: deploy\nrun: {command: [\"true\"]}\nleases:\n  - {key: \"deploy:{channel}\", on_conflict: reject}\n"
	f["jobs/gated.yaml"] = "name: gated\nrun: {command: [\"true\"]}\n"
	f["policies/batch.yaml"] = "rules:\n  - id: deploy\n    jobs: [deploy]\n    users: [\"*\"]\n  - id: gated\n    jobs: [gated]\n    users: [\"*\"]\n    approval: {count: 1, groups: [operators]}\n"
	return f
}()

// POST /v1/runs/batch requests several runs in one call, each item decided
// and recorded as POST /v1/runs would: an item that call would refuse is
// refused alone and the others are recorded, in order (a later item sees
// an earlier one's run); an item that is no run request refuses the whole
// call and nothing is recorded.
func TestRunsBatch(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, batchFiles)
		ctx := e.ctx()
		reqs := []protocol.RunRequest{
			{Job: "echo", Channel: "prod", IdempotencyKey: "backfill-0", Params: json.RawMessage(`{"message":"first"}`)},
			{Job: "echo", Channel: "prod", Params: json.RawMessage(`{"message":"NOT VALID"}`)},
			{Job: "secret", Channel: "prod"},
			{Job: "nope", Channel: "prod"},
			{Job: "gated", Channel: "prod", Reason: "needs a yes"},
			{Job: "deploy", Channel: "prod"},
			{Job: "deploy", Channel: "prod"}, // the key the item before took
			{Job: "echo", Channel: "prod", Params: json.RawMessage(`{"message":"last"}`)},
		}
		answers, err := e.admin.CreateRuns(ctx, reqs)
		require.NoError(t, err)
		require.Len(t, answers, len(reqs))
		problem := func(err error) protocol.Problem {
			t.Helper()
			var ae *apiclient.APIError
			require.True(t, errors.As(err, &ae), "got %v", err)
			return ae.Problem
		}
		for _, i := range []int{0, 4, 5, 7} {
			require.NoError(t, answers[i].Err, "item %d", i)
			require.True(t, answers[i].Created, "item %d", i)
		}
		require.Equal(t, "queued", answers[0].Run.State)
		require.Equal(t, "pending_approval", answers[4].Run.State)
		require.Equal(t, "queued", answers[5].Run.State)

		p := problem(answers[1].Err)
		require.Equal(t, protocol.CodeInvalidParams, p.Code)
		require.Equal(t, http.StatusUnprocessableEntity, p.Status)
		require.Equal(t, "message", p.Field)
		p = problem(answers[2].Err)
		require.Equal(t, protocol.CodeDenied, p.Code)
		require.NotNil(t, p.Decision)
		require.Equal(t, "denied", e.run(p.RunID).State, "a denied item's run is kept for audit")
		p = problem(answers[3].Err)
		require.Equal(t, protocol.CodeUnknownJob, p.Code)
		require.Equal(t, "job", p.Field)
		p = problem(answers[6].Err)
		require.Equal(t, protocol.CodeLeaseHeld, p.Code)
		require.Equal(t, answers[5].Run.ID, p.RunID, "the earlier item of the same batch holds the key")

		// Every recorded run has its audit event, and only those.
		runs, err := e.admin.ListRuns(ctx, apiclient.ListRunsParams{Limit: 100})
		require.NoError(t, err)
		require.Len(t, runs.Runs, 5, "four runs and the denied one")
		events, err := e.admin.AuditQuery(ctx, apiclient.AuditQuery{Limit: 1000})
		require.NoError(t, err)
		kinds := map[string]int{}
		for _, ev := range events.Events {
			kinds[ev.Action]++
		}
		require.Equal(t, 4, kinds["run.requested"])
		require.Equal(t, 1, kinds["run.denied"])

		// The queued runs are claimed in the items' order.
		rc := e.runner()
		for _, i := range []int{0, 5, 7} {
			_, ref := e.claim(rc)
			require.Equal(t, answers[i].Run.ID, ref.RunID)
		}

		// The batch again: the idempotency key names the first run (200,
		// not created); the others are new requests.
		again, err := e.admin.CreateRuns(ctx, reqs[:1])
		require.NoError(t, err)
		require.NoError(t, again[0].Err)
		require.False(t, again[0].Created)
		require.Equal(t, answers[0].Run.ID, again[0].Run.ID)
		code, body := e.rawBatch(`{"runs":[{"job":"echo","channel":"prod","idempotency_key":"backfill-0","params":{"message":"first"}}]}`)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `"status":200`)
		// The same key with other parameters is a conflict of that item.
		other, err := e.admin.CreateRuns(ctx, []protocol.RunRequest{{Job: "echo", Channel: "prod", IdempotencyKey: "backfill-0", Params: json.RawMessage(`{"message":"other"}`)}})
		require.NoError(t, err)
		require.Equal(t, protocol.CodeIdempotencyConflict, problem(other[0].Err).Code)

		// Refused as a whole, with the field of the item at fault, and
		// nothing recorded.
		many := make([]string, protocol.MaxRunBatch+1)
		for i := range many {
			many[i] = `{"job":"echo","channel":"prod"}`
		}
		for _, c := range []struct{ name, body, field string }{
			{"no items", `{"runs":[]}`, ""},
			{"no list", `{}`, ""},
			{"too many", `{"runs":[` + strings.Join(many, ",") + `]}`, ""},
			{"missing job", `{"runs":[{"job":"echo","channel":"prod"},{"channel":"prod"}]}`, "runs[1].job"},
			{"missing channel", `{"runs":[{"job":"echo"}]}`, "runs[0].channel"},
			{"bad key", `{"runs":[{"job":"echo","channel":"prod","idempotency_key":"a b"}]}`, "runs[0].idempotency_key"},
			{"long reason", `{"runs":[{"job":"echo","channel":"prod","reason":"` + strings.Repeat("x", 1001) + `"}]}`, "runs[0].reason"},
			{"same key twice", `{"runs":[{"job":"echo","channel":"prod","idempotency_key":"k"},{"job":"echo","channel":"prod","idempotency_key":"k"}]}`, "runs[1].idempotency_key"},
			{"unknown field", `{"runs":[{"job":"echo","channel":"prod","jbo":"x"}]}`, ""},
			{"not json", `{"runs":[`, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				code, body := e.rawBatch(c.body)
				require.Equal(t, http.StatusBadRequest, code, body)
				var p protocol.Problem
				require.NoError(t, json.Unmarshal([]byte(body), &p))
				require.Equal(t, protocol.CodeBadRequest, p.Code)
				require.Equal(t, c.field, p.Field)
			})
		}
		after, err := e.admin.ListRuns(ctx, apiclient.ListRunsParams{Limit: 100})
		require.NoError(t, err)
		require.Len(t, after.Runs, 5, "a refused call records nothing")

		// No token, no batch.
		code, pcode, _ := e.bearer(http.MethodPost, "/v1/runs/batch", "", `{"runs":[{"job":"echo","channel":"prod"}]}`)
		require.Equal(t, http.StatusUnauthorized, code)
		require.Equal(t, protocol.CodeUnauthorized, pcode)

		// A caller the policy denies gets each item denied, and the runs
		// kept.
		_, err = e.admin.CreatePrincipal(ctx, protocol.PrincipalRequest{Name: "mallory"})
		require.NoError(t, err)
		tok, err := e.admin.CreatePrincipalToken(ctx, "mallory", protocol.PrincipalTokenRequest{})
		require.NoError(t, err)
		m := &apiclient.Client{BaseURL: e.srv.URL, Token: tok.Token, HTTP: e.srv.Client()}
		denied, err := m.CreateRuns(ctx, []protocol.RunRequest{{Job: "echo", Channel: "prod"}, {Job: "deploy", Channel: "prod"}})
		require.NoError(t, err)
		for i, a := range denied {
			require.True(t, apiclient.IsCode(a.Err, protocol.CodeDenied), "item %d: %v", i, a.Err)
		}
	})
}

func (e *testEnv) rawBatch(body string) (int, string) {
	e.t.Helper()
	code, _, b := e.bearer(http.MethodPost, "/v1/runs/batch", adminToken, body)
	return code, string(b)
}

// A batch's items are in its caller's tenant: an idempotency key another
// tenant used names nothing here.
func TestRunsBatchTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, mt2Files)
		b := newMT2TenantB(t, e)
		ctx := e.ctx()
		req := []protocol.RunRequest{{Job: "echo", Channel: "prod", IdempotencyKey: "shared-key"}}
		mine, err := e.admin.CreateRuns(ctx, req)
		require.NoError(t, err)
		require.NoError(t, mine[0].Err)
		theirs, err := b.admin.CreateRuns(ctx, req)
		require.NoError(t, err)
		if theirs[0].Err == nil {
			require.True(t, theirs[0].Created, "tenant B's request must not return tenant A's run")
			require.NotEqual(t, mine[0].Run.ID, theirs[0].Run.ID)
		}
		_, err = b.admin.GetRun(ctx, mine[0].Run.ID)
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), fmt.Sprint(err))
	})
}

// Batches racing with the same idempotency keys: each key gets one run,
// created by exactly one of the calls, and every call's answer for that key
// names it.
func TestRunsBatchIdempotencyRace(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		const callers, keys = 8, 5
		reqs := make([]protocol.RunRequest, keys)
		for k := range reqs {
			reqs[k] = protocol.RunRequest{Job: "echo", Channel: "prod", IdempotencyKey: fmt.Sprintf("race-%d", k)}
		}
		answers := make([][]apiclient.RunAnswer, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() { answers[c], errs[c] = e.admin.CreateRuns(e.ctx(), reqs) })
		}
		wg.Wait()
		for k := range keys {
			created, id := 0, ""
			for c := range callers {
				require.NoError(t, errs[c])
				a := answers[c][k]
				require.NoError(t, a.Err, "caller %d key %d", c, k)
				if id == "" {
					id = a.Run.ID
				}
				require.Equal(t, id, a.Run.ID, "caller %d key %d", c, k)
				if a.Created {
					created++
				}
			}
			require.Equal(t, 1, created, "key %d", k)
		}
		runs, err := e.admin.ListRuns(e.ctx(), apiclient.ListRunsParams{Limit: 100})
		require.NoError(t, err)
		require.Len(t, runs.Runs, keys)
	})
}
