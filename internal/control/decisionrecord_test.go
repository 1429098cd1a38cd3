package control

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestRecordWithDispatch: the record the re-check at dispatch splices
// together decodes to what decoding the stored record and encoding it with
// the dispatch decision gave, whatever spacing and key order the store
// returned the record in (PostgreSQL's jsonb has its own), and the request
// part read is the request's grants and explanation.
func TestRecordWithDispatch(t *testing.T) {
	request := Decision{
		Allowed: true, Rule: "deploy", Explanation: "allowed: rule deploy",
		Approval: &ApprovalRequirement{Count: 1, Groups: []string{"sre"}, Approvers: []string{"bob"}},
		Grants:   map[string]string{"db": "write", "s3": "read"}, ForksFull: true,
		Detail: json.RawMessage(`{"rules":[{"id":"deploy","matched":true}]}`),
	}
	dispatch := Decision{Allowed: true, Rule: "deploy", Explanation: "allowed at dispatch", Grants: map[string]string{"db": "read"},
		Detail: json.RawMessage(`{"rules":[]}`)}
	for name, stored := range map[string]func() []byte{
		"as encoded": func() []byte { b, _ := json.Marshal(decisionRecord{Request: request}); return b },
		"jsonb style": func() []byte {
			return []byte(`{"request": {"rule": "deploy", "detail": {"rules": [{"id": "deploy", "matched": true}]}, "grants": {"db": "write", "s3": "read"}, "allowed": true, "approval": {"count": 1, "groups": ["sre"], "approvers": ["bob"]}, "forks_full": true, "explanation": "allowed: rule deploy"}}`)
		},
		"with an old dispatch": func() []byte {
			b, _ := json.Marshal(decisionRecord{Request: request, Dispatch: &Decision{Explanation: "old"}})
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			raw := stored()
			var want decisionRecord
			require.NoError(t, json.Unmarshal(raw, &want))
			want.Dispatch = &dispatch
			wantJSON, err := json.Marshal(want)
			require.NoError(t, err)

			reqRaw, part, err := readRecord(raw)
			require.NoError(t, err)
			require.Equal(t, request.Grants, part.Grants)
			require.Equal(t, request.Explanation, part.Explanation)
			got, err := recordWith(reqRaw, dispatch)
			require.NoError(t, err)
			var gotRec decisionRecord
			require.NoError(t, json.Unmarshal(got, &gotRec))
			gotJSON, err := json.Marshal(gotRec)
			require.NoError(t, err)
			require.JSONEq(t, string(wantJSON), string(gotJSON))
			require.True(t, json.Valid(got))
		})
	}

	// A record without a request's decision reads as the zero decision,
	// as decoding it into decisionRecord did.
	for _, raw := range []string{`{}`, `{"request":null}`} {
		reqRaw, part, err := readRecord(json.RawMessage(raw))
		require.NoError(t, err)
		require.Empty(t, part.Grants)
		got, err := recordWith(reqRaw, dispatch)
		require.NoError(t, err)
		var rec decisionRecord
		require.NoError(t, json.Unmarshal(got, &rec))
		require.Equal(t, Decision{}, rec.Request)
		require.True(t, bytes.Contains(got, []byte(`"dispatch":`)))
	}
	_, _, err := readRecord(json.RawMessage(`{"request":`))
	require.Error(t, err)
}

// countingDefs counts Resolve calls, by channel.
type countingDefs struct {
	Definitions
	mu sync.Mutex
	n  map[string]int
}

func (d *countingDefs) Resolve(ctx context.Context, channel, ref string) (Catalog, error) {
	d.mu.Lock()
	d.n[channel]++
	d.mu.Unlock()
	return d.Definitions.Resolve(ctx, channel, ref)
}

func (d *countingDefs) count(channel string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[channel]
}

// TestClaimResolvesDefinitionsOnce: the re-check at dispatch of the
// attempts one claim hands out resolves the channel's definitions once,
// not once per attempt, and still re-checks every attempt; a claim of one
// resolves once too.
func TestClaimResolvesDefinitionsOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, jobSpec(time.Minute, time.Hour, 1))
		defs := &countingDefs{Definitions: &fakeDefs{spec: e.spec}, n: map[string]int{}}
		e.a = e.newService(st, func(c *Config) { c.Definitions = defs })
		rn := e.runner("r1")
		for range 5 {
			e.request()
		}
		before := defs.count("prod")
		asgs, err := e.a.ClaimBatch(e.ctx(), call(rn, nil), &protocol.ClaimRequest{RequestID: "c1", Max: 5})
		require.NoError(t, err)
		require.Len(t, asgs, 5)
		require.Equal(t, 1, defs.count("prod")-before, "Resolve calls for a claim of 5")
		for _, a := range asgs {
			r := e.run(a.RunID)
			var rec struct {
				Dispatch *Decision `json:"dispatch"`
			}
			require.NoError(t, json.Unmarshal(r.Decision, &rec))
			require.NotNil(t, rec.Dispatch, "run %s was not re-checked", r.ID)
			require.True(t, rec.Dispatch.Allowed)
		}

		e.request()
		before = defs.count("prod")
		e.claim(e.a, rn, "c2")
		require.Equal(t, 1, defs.count("prod")-before, "Resolve calls for a claim of 1")
	})
}
