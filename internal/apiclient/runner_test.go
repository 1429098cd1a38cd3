package apiclient

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
)

// signingServer verifies every runner request exactly as a server must: the
// canonical message is rebuilt from the raw path, query and body received.
type signingServer struct {
	t      *testing.T
	clk    *clock.Fake
	mu     sync.Mutex
	pub    ed25519.PublicKey
	nonces map[string]bool
	seen   []*http.Request
	bodies map[string][]byte // path → last body
}

func (s *signingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	require.NoError(s.t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, r)
	s.bodies[r.URL.Path] = body
	if r.URL.Path == "/jp/v1/runner/register" {
		require.Equal(s.t, "Bearer reg-token", r.Header.Get("Authorization"))
		require.Empty(s.t, r.Header.Get(protocol.HeaderSignature))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"runner_id":"rnr_1","tenant":"default","pool":"p","labels":[],"status":"active"}`)
		return
	}
	sr := protocol.SignedRequest{
		Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
		Timestamp: r.Header.Get(protocol.HeaderTimestamp), Nonce: r.Header.Get(protocol.HeaderNonce),
		Runner: r.Header.Get(protocol.HeaderRunner), Run: r.Header.Get(protocol.HeaderRun),
		Attempt: r.Header.Get(protocol.HeaderAttempt), Lease: r.Header.Get(protocol.HeaderLease), Body: body,
	}
	if !protocol.Verify(s.pub, &sr, r.Header.Get(protocol.HeaderSignature)) || !protocol.ValidNonce(sr.Nonce) || s.nonces[sr.Nonce] {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"type":"about:blank","title":"Unauthorized","status":401,"code":"signature_invalid","detail":"bad signature"}`)
		return
	}
	s.nonces[sr.Nonce] = true
	require.Equal(s.t, "rnr_1", sr.Runner)
	require.Equal(s.t, "1798761600", sr.Timestamp)
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/jp/v1/runner/heartbeat":
		_, _ = io.WriteString(w, `{"server_time":"2027-01-01T00:00:00Z","status":"active","cancel_attempts":["att_9"]}`)
	case "/jp/v1/runner/claim":
		var cr protocol.ClaimRequest
		require.NoError(s.t, json.Unmarshal(body, &cr))
		if cr.RequestID == "empty" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, _ = io.WriteString(w, `{"run_id":"run_1","attempt_id":"att_1","attempt_number":1,`+
			`"lease":{"token":"lt","expires_at":"2027-01-01T00:00:30Z","deadline":"2027-01-01T00:10:00Z","ttl_seconds":30},`+
			`"job":{"name":"j","channel":"prod","commit":"c0ffee","command":["true"],"env":{},"timeout_seconds":600},`+
			`"params":{},"leases":[],"artifacts":[]}`)
	case "/jp/v1/runner/attempt/renew":
		require.Equal(s.t, "att_1", sr.Attempt)
		require.Equal(s.t, "lt", sr.Lease)
		_, _ = io.WriteString(w, `{"expires_at":"2027-01-01T00:00:30Z","cancel_requested":true}`)
	case "/jp/v1/runner/attempt/logs":
		w.WriteHeader(http.StatusNoContent)
	case "/jp/v1/runner/attempt/relinquish":
		_, _ = io.WriteString(w, `{"status":"relinquished"}`)
	case "/jp/v1/runner/attempt/result":
		_, _ = io.WriteString(w, `{"run_state":"succeeded"}`)
	case "/jp/v1/runner/keys":
		var rk protocol.RotateKeyRequest
		require.NoError(s.t, json.Unmarshal(body, &rk))
		pub, err := protocol.DecodePublicKey(rk.PublicKey)
		require.NoError(s.t, err)
		s.pub = pub
		_, _ = io.WriteString(w, `{"status":"rotated"}`)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func TestRunnerClientSignsEveryRequest(t *testing.T) {
	t.Parallel()
	pub, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	clk := clock.NewFake(time.Unix(1798761600, 0))
	srv := &signingServer{t: t, clk: clk, pub: pub, nonces: map[string]bool{}, bodies: map[string][]byte{}}
	ts := httptest.NewServer(openapitest.HandlerAt(t, "/jp", srv))
	t.Cleanup(ts.Close)
	ctx := context.Background()

	rc := &RunnerClient{BaseURL: ts.URL + "/jp/", Clock: clk}
	reg, err := rc.Register(ctx, "reg-token", protocol.RegisterRequest{Name: "n", PublicKey: protocol.EncodeKey(pub)})
	require.NoError(t, err)
	require.Equal(t, "rnr_1", reg.RunnerID)
	rc.RunnerID, rc.Key = reg.RunnerID, key

	hb, err := rc.Heartbeat(ctx, protocol.HeartbeatRequest{Status: "idle"})
	require.NoError(t, err)
	require.Equal(t, []string{"att_9"}, hb.CancelAttempts)
	require.JSONEq(t, `{"status":"idle","attempts":[]}`, string(srv.bodies["/jp/v1/runner/heartbeat"]))

	a, err := rc.Claim(ctx, 0, "empty")
	require.NoError(t, err)
	require.Nil(t, a)
	a, err = rc.Claim(ctx, 25, "req-1")
	require.NoError(t, err)
	require.Equal(t, "att_1", a.AttemptID)

	ref := AttemptRef{RunID: a.RunID, AttemptID: a.AttemptID, LeaseToken: a.Lease.Token}
	rr, err := rc.Renew(ctx, ref)
	require.NoError(t, err)
	require.True(t, rr.CancelRequested)
	require.NoError(t, rc.Logs(ctx, ref, protocol.LogsRequest{Seq: 1, Lines: []protocol.LogLine{{Stream: "stdout", Text: "hi"}}}))
	require.NoError(t, rc.Relinquish(ctx, ref, "shutdown"))
	res, err := rc.Result(ctx, ref, protocol.ResultRequest{Outcome: "succeeded", RequestID: "r"})
	require.NoError(t, err)
	require.Equal(t, "succeeded", res.RunState)

	// After rotation the server only knows the new key: the next request
	// verifies only if the client swapped keys.
	_, newKey, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	require.NoError(t, rc.RotateKey(ctx, newKey))
	_, err = rc.Heartbeat(ctx, protocol.HeartbeatRequest{Status: "idle"})
	require.NoError(t, err)

	// A client signing with the wrong key is refused: the check can fail.
	bad := &RunnerClient{BaseURL: ts.URL + "/jp", RunnerID: "rnr_1", Key: key, Clock: clk}
	_, err = bad.Heartbeat(ctx, protocol.HeartbeatRequest{Status: "idle"})
	require.True(t, IsCode(err, protocol.CodeSignatureInvalid), "err = %v", err)
	require.Equal(t, http.StatusUnauthorized, StatusOf(err))
	require.False(t, Retryable(err))
}

func TestRunnerClientNoncesAreFresh(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		n := NewNonce()
		require.True(t, protocol.ValidNonce(n), n)
		require.False(t, seen[n])
		seen[n] = true
	}
}

func TestClaimRejectsShortHTTPTimeout(t *testing.T) {
	t.Parallel()
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	rc := &RunnerClient{BaseURL: "http://127.0.0.1:1", RunnerID: "r", Key: key, HTTP: &http.Client{Timeout: 10 * time.Second}}
	_, err = rc.Claim(context.Background(), 25, "x")
	require.ErrorContains(t, err, "does not exceed the claim wait")
	_, err = rc.Claim(context.Background(), 31, "x")
	require.ErrorContains(t, err, "outside 0..30")
}
