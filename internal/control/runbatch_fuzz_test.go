package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var batchFuzzFiles = map[string]string{
	"jobs/echo.yaml":   "name: echo\nparams:\n  type: object\n  additionalProperties: false\n  properties:\n    message: {type: string, default: hi, pattern: \"^[a-z ]{1,20}$\"}\nrun: {command: [\"true\"]}\n",
	"jobs/deploy.yaml": "name: deploy\nrun: {command: [\"true\"]}\nleases:\n  - {key: \"deploy:{channel}\", on_conflict: reject}\n",
	"jobs/gated.yaml":  "name: gated\nrun: {command: [\"true\"]}\n",
	"jobs/secret.yaml": "name: secret\nrun: {command: [\"true\"]}\n",
	"groups.yaml":      "groups:\n  operators: {members: [admin]}\n",
	"policies/all.yaml": "rules:\n  - id: open\n    jobs: [echo, deploy]\n    users: [\"*\"]\n" +
		"  - id: gated\n    jobs: [gated]\n    users: [\"*\"]\n    approval: {count: 1, groups: [operators]}\n",
}

// FuzzRunsRequest: whatever list of run requests POST /v1/runs/batch
// carries, the call is either refused as a whole as a bad request (naming
// the item at fault when it is one) with nothing recorded, or answered
// with one outcome per item, in order: a run (new, or the earlier run of
// its idempotency key) or a refusal of that item alone (never a server
// error), and every run answered is stored as answered.
func FuzzRunsRequest(f *testing.F) {
	f.Add([]byte(`{"runs":[{"job":"echo","channel":"prod"}]}`))
	f.Add([]byte(`{"runs":[{"job":"echo","channel":"prod","params":{"message":"BAD"}},{"job":"secret","channel":"prod"},{"job":"gated","channel":"prod"}]}`))
	f.Add([]byte(`{"runs":[{"job":"deploy","channel":"prod"},{"job":"deploy","channel":"prod"},{"job":"nope","channel":"prod"}]}`))
	f.Add([]byte(`{"runs":[{"job":"echo","channel":"prod","idempotency_key":"k"},{"job":"echo","channel":"prod","idempotency_key":"k"}]}`))
	f.Add([]byte(`{"runs":[{"job":"echo","channel":"staging","ref":"x"},{"job":"echo"}]}`))
	f.Add([]byte(`{"runs":[]}`))
	ctx := context.Background()
	st := testdb.SQLite(f)
	repo := f.TempDir()
	_, err := gitsync.InitRepo(repo, "main", batchFuzzFiles, "init")
	require.NoError(f, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(f, err)
	fc := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	svc, err := control.New(control.Config{Store: st, Clock: fc, Definitions: defs})
	require.NoError(f, err)
	tn, err := st.TenantEnsure(ctx, "default", fc.NowOrNil())
	require.NoError(f, err)
	actor := principal.Actor{TenantID: tn.ID, Name: "admin", Kind: "user", Admin: true}
	newest := func(t *testing.T) string {
		runs, _, err := svc.ListRuns(ctx, actor, store.RunListParams{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 0 {
			return ""
		}
		return runs[0].Run.ID
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req protocol.RunsRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		before := newest(t)
		out, err := svc.RequestRuns(ctx, actor, req.Runs)
		if err != nil {
			if !errors.Is(err, protocol.ErrBadRequest) {
				t.Fatalf("refusal %v is not a bad request", err)
			}
			var fe *protocol.FieldError
			if errors.As(err, &fe) && !strings.HasPrefix(fe.Field, "runs[") {
				t.Fatalf("refusal names field %q, not an item", fe.Field)
			}
			if got := newest(t); got != before {
				t.Fatalf("a refused call recorded run %s", got)
			}
			return
		}
		if len(out) != len(req.Runs) || len(out) > protocol.MaxRunBatch {
			t.Fatalf("%d outcomes for %d items", len(out), len(req.Runs))
		}
		for i, o := range out {
			var pe *protocol.Error
			switch {
			case o.Err != nil && o.View != nil:
				t.Fatalf("item %d: both a run and %v", i, o.Err)
			case o.Err != nil && (!errors.As(o.Err, &pe) || pe.Status >= 500):
				t.Fatalf("item %d: %v is not a refusal", i, o.Err)
			case o.Err != nil:
				var de *control.DeniedError
				if errors.As(o.Err, &de) {
					if r, err := st.RunGetByID(ctx, de.RunID, false); err != nil || r.State != store.RunDenied {
						t.Fatalf("item %d: denied run %s not kept: %v %v", i, de.RunID, r, err)
					}
				}
			case o.View == nil:
				t.Fatalf("item %d: neither a run nor an error", i)
			default:
				r, err := st.RunGetByID(ctx, o.View.Run.ID, false)
				if err != nil {
					t.Fatalf("item %d: run %s answered but not stored: %v", i, o.View.Run.ID, err)
				}
				if o.Created && (r.State != o.View.Run.State || r.Job != req.Runs[i].Job) {
					t.Fatalf("item %d: answered %s %s, stored %s %s", i, o.View.Run.Job, o.View.Run.State, r.Job, r.State)
				}
			}
		}
	})
}
