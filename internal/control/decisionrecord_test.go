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
		Approval: &protocol.ApprovalRequirement{Count: 1, Groups: []string{"sre"}, Approvers: []string{"bob"}},
		Grants:   map[string]string{"db": "write", "s3": "read"}, ForksFull: true,
		Detail: json.RawMessage(`{"rules":[{"id":"deploy","matched":true}]}`),
	}
	dispatch := Decision{Allowed: true, Rule: "deploy", Explanation: "allowed at dispatch", Grants: map[string]string{"db": "read"},
		Detail: json.RawMessage(`{"rules":[]}`)}
	for name, stored := range map[string]func() []byte{
		"as encoded": func() []byte { b, _ := json.Marshal(protocol.DecisionRecord{Request: request}); return b },
		"jsonb style": func() []byte {
			return []byte(`{"request": {"rule": "deploy", "detail": {"rules": [{"id": "deploy", "matched": true}]}, "grants": {"db": "write", "s3": "read"}, "allowed": true, "approval": {"count": 1, "groups": ["sre"], "approvers": ["bob"]}, "forks_full": true, "explanation": "allowed: rule deploy"}}`)
		},
		"with an old dispatch": func() []byte {
			b, _ := json.Marshal(protocol.DecisionRecord{Request: request, Dispatch: &Decision{Explanation: "old"}})
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			raw := stored()
			var want protocol.DecisionRecord
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
			var gotRec protocol.DecisionRecord
			require.NoError(t, json.Unmarshal(got, &gotRec))
			gotJSON, err := json.Marshal(gotRec)
			require.NoError(t, err)
			require.JSONEq(t, string(wantJSON), string(gotJSON))
			require.True(t, json.Valid(got))
		})
	}

	// A record without a request's decision reads as the zero decision,
	// as decoding it into protocol.DecisionRecord did.
	for _, raw := range []string{`{}`, `{"request":null}`} {
		reqRaw, part, err := readRecord(json.RawMessage(raw))
		require.NoError(t, err)
		require.Empty(t, part.Grants)
		got, err := recordWith(reqRaw, dispatch)
		require.NoError(t, err)
		var rec protocol.DecisionRecord
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

// storedRecord is a decision record as a request writes it for a job
// allowed by one rule: the shape and size (about 450 bytes) the claim of
// every queued run reads.
const storedRecord = `{"request":{"allowed":true,"rule":"all","explanation":"allowed: rule all (policies/all.yaml:1) allows admin to run job noop in channel prod","grants":{"db":"read"},"detail":{"allowed":true,"rule":"all","explanation":"allowed: rule all (policies/all.yaml:1) allows admin to run job noop in channel prod","rules":[{"id":"all","file":"policies/all.yaml","line":1,"effect":"allow","matched":true,"reason":"users \"*\" matches any authenticated actor"}],"unrelated_rules":0}}}`

// FuzzReadRecord: reading a record gives what decoding it gives, the
// request's decision byte for byte, its grants and explanation, and an
// error for the same records, whichever path the record takes.
func FuzzReadRecord(f *testing.F) {
	for _, s := range []string{
		storedRecord, `{"request":{}}`, `{"request":null}`, `{}`, `{"request":{"grants":{"a":"b"}},"dispatch":{}}`,
		`{"request":{"a":1}}}`, `{"request":{"a":1},"request":{"b":2}}`, `{"request":{"grants":1}}`,
		`{"request":{"explanation":"x\ud800"}}`, `{"request":{} }`, `{"request":{"a":"}}`, `{"request":{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stored []byte) {
		gotRaw, gotPart, gotErr := readRecord(stored)
		wantRaw, wantPart, wantErr := readRecordDecoded(stored)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, decoding gives %v", stored, gotErr, wantErr)
		}
		if gotErr != nil {
			return
		}
		if !bytes.Equal(gotRaw, wantRaw) {
			t.Fatalf("%q: request %q, decoding gives %q", stored, gotRaw, wantRaw)
		}
		require.Equal(t, wantPart, gotPart, "%q", stored)
	})
}

// BenchmarkReadRecord: reading the record a queued run's claim reads, as
// readRecord does and by decoding it whole.
func BenchmarkReadRecord(b *testing.B) {
	for name, read := range map[string]func(json.RawMessage) (json.RawMessage, requestPart, error){
		"cut": readRecord, "decoded": readRecordDecoded,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := read(json.RawMessage(storedRecord)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
