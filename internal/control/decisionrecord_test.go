package control

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
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
