package control

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// FuzzResultsRequest: whatever body a runner sends to POST
// /v1/runner/results, the checks before the transaction either refuse it
// as a bad request (naming the item at fault when it is one) or accept 1
// to 32 items, each naming a distinct attempt with its run and lease token,
// each checked as a single result, and each run as a call of the signing
// runner for exactly that attempt.
func FuzzResultsRequest(f *testing.F) {
	f.Add([]byte(`{"results":[{"run_id":"r","attempt_id":"a","lease_token":"l","outcome":"succeeded"}]}`), false)
	f.Add([]byte(`{"results":[{"run_id":"r","attempt_id":"a","lease_token":"l","outcome":"failed","exit_code":2},{"run_id":"r","attempt_id":"a","lease_token":"l","outcome":"succeeded"}]}`), false)
	f.Add([]byte(`{"results":[{"run_id":"r","attempt_id":"a","lease_token":"l","outcome":"succeeded","logs":{"seq":1,"lines":[{"stream":"video"}]}}]}`), false)
	f.Add([]byte(`{"results":[]}`), true)
	f.Add([]byte(`{"results":[{"attempt_id":"a","outcome":"succeeded"}]}`), false)
	f.Fuzz(func(t *testing.T, body []byte, headers bool) {
		var req protocol.ResultsRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		call := &authn.SignedCall{Runner: &store.Runner{ID: "rnr_1", Tenant: "tnt_1"}, Body: body}
		if headers {
			call.Run, call.Attempt, call.Lease = "r", "a", "l"
		}
		ins, calls, err := prepareResults(call, &req)
		if err != nil {
			if !errors.Is(err, protocol.ErrBadRequest) {
				t.Fatalf("refusal %v is not a bad request", err)
			}
			var fe *protocol.FieldError
			if errors.As(err, &fe) && !strings.HasPrefix(fe.Field, "results[") {
				t.Fatalf("refusal names field %q, not an item", fe.Field)
			}
			return
		}
		if headers {
			t.Fatal("a call with attempt headers was accepted")
		}
		n := len(req.Results)
		if n < 1 || n > protocol.MaxResultsBatch || len(ins) != n || len(calls) != n {
			t.Fatalf("accepted %d items (%d inputs, %d calls)", n, len(ins), len(calls))
		}
		seen := map[string]bool{}
		for i, it := range req.Results {
			c := calls[i]
			if it.RunID == "" || it.AttemptID == "" || it.LeaseToken == "" || seen[it.AttemptID] {
				t.Fatalf("item %d accepted: %+v", i, it)
			}
			seen[it.AttemptID] = true
			if c.Runner != call.Runner || c.Run != it.RunID || c.Attempt != it.AttemptID || c.Lease != it.LeaseToken {
				t.Fatalf("item %d runs as %+v", i, c)
			}
			if it.Outcome != "succeeded" && it.Outcome != "failed" {
				t.Fatalf("item %d: outcome %q accepted", i, it.Outcome)
			}
			if want := map[string]store.AttemptState{"succeeded": store.AttemptSucceeded, "failed": store.AttemptFailed}[it.Outcome]; ins[i].state != want {
				t.Fatalf("item %d: outcome %q ends the attempt %s", i, it.Outcome, ins[i].state)
			}
		}
	})
}
