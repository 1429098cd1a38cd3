package control

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/store"
)

// TestAuditDetailsAsMaps: the detail structs of the per-run audit events
// encode to the very bytes the maps they replaced gave (sorted keys,
// absent optional keys, null times), so that events stored before and
// after read the same.
func TestAuditDetailsAsMaps(t *testing.T) {
	exp := time.Date(2026, 12, 2, 9, 0, 0, 123, time.UTC)
	a := &store.Attempt{ID: "att_1", Number: 2, RunnerID: "rnr_1", ClaimRequestID: "req-1", LeaseDigest: "0123456789abcdef0123"}
	holderMap := map[string]any{"registration": "rnr_1", "incarnation": "req-1", "lease": "0123456789abcdef"}
	for _, c := range []struct {
		name string
		got  any
		want map[string]any
	}{
		{"holder", lease.Holder(a), holderMap},
		{"holder without a claim request", lease.Holder(&store.Attempt{Number: 3}),
			map[string]any{"registration": "", "incarnation": "attempt-3", "lease": ""}},
		{"requested", requestedDetails{Job: "j", Channel: "prod", Commit: "c0ffee", Attempt: "att_1", Decision: "allow", Rule: "r"},
			map[string]any{"job": "j", "channel": "prod", "commit": "c0ffee", "attempt": "att_1", "decision": "allow", "rule": "r"}},
		{"claimed", claimedDetails{Attempt: "att_1", Number: 2, Runner: "rnr_1", LeaseExpiresAt: &exp, Holder: lease.Holder(a)},
			map[string]any{"attempt": "att_1", "number": 2, "runner": "rnr_1", "lease_expires_at": &exp, "holder": holderMap}},
		{"claimed without an expiry", claimedDetails{Attempt: "att_1", Number: 2, Runner: "rnr_1", Holder: lease.Holder(a)},
			map[string]any{"attempt": "att_1", "number": 2, "runner": "rnr_1", "lease_expires_at": (*time.Time)(nil), "holder": holderMap}},
		{"ended", endedDetails{Attempt: "att_1", Number: 2, State: store.AttemptSucceeded, Holder: lease.Holder(a), RunState: store.RunSucceeded},
			map[string]any{"attempt": "att_1", "number": 2, "state": store.AttemptSucceeded, "holder": holderMap, "run_state": store.RunSucceeded}},
		{"ended with a reason and a next attempt", endedDetails{Attempt: "att_1", Number: 2, State: store.AttemptFailed, Holder: lease.Holder(a),
			Reason: "exit 1", NextAttempt: "att_2", RunState: store.RunQueued},
			map[string]any{"attempt": "att_1", "number": 2, "state": store.AttemptFailed, "holder": holderMap, "reason": "exit 1",
				"next_attempt": "att_2", "run_state": store.RunQueued}},
	} {
		got, err := json.Marshal(c.got)
		require.NoError(t, err)
		want, err := json.Marshal(c.want)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), c.name)
	}
}
