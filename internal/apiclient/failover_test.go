package apiclient

import (
	"context"
	"crypto/ed25519"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

// replica answers renewals and claims, counting what it served; status,
// when set, is its answer to everything instead.
type replica struct {
	srv    *httptest.Server
	served atomic.Int32
	status int
	hold   chan struct{} // when set, claims wait on it (a long poll)
}

func newReplica(t *testing.T, status int) *replica {
	r := &replica{status: status}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		if r.status != 0 {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(r.status)
			_, _ = io.WriteString(w, `{"type":"about:blank","title":"x","status":503,"code":"unavailable","detail":"draining"}`)
			return
		}
		if req.URL.Path == "/v1/runner/claim" && r.hold != nil {
			select {
			case <-r.hold:
			case <-req.Context().Done():
				return
			}
		}
		r.served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch req.URL.Path {
		case "/v1/runner/claim":
			w.WriteHeader(http.StatusNoContent)
		default:
			_, _ = io.WriteString(w, `{"expires_at":"2027-01-01T00:00:30Z","cancel_requested":false}`)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func failoverClient(urls ...string) *RunnerClient {
	_, priv, _ := ed25519.GenerateKey(nil)
	c := &RunnerClient{RunnerID: "rnr_1", Key: priv, HTTP: &http.Client{Timeout: 40 * time.Second}}
	for _, u := range urls {
		c.Servers = append(c.Servers, Server{URL: u})
	}
	return c
}

var ref = AttemptRef{RunID: "run_1", AttemptID: "att_1", LeaseToken: "lt"}

// TestFailoverDeadAndUnavailable: a server that refuses connections or
// answers 503 is skipped for the next, which becomes current and stays so.
func TestFailoverDeadAndUnavailable(t *testing.T) {
	dead := newReplica(t, 0)
	dead.srv.Close()
	draining := newReplica(t, http.StatusServiceUnavailable)
	good := newReplica(t, 0)
	c := failoverClient(dead.srv.URL, draining.srv.URL, good.srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Renew(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, good.srv.URL, c.Current().URL)
	_, err = c.Claim(ctx, 0, "r1")
	require.NoError(t, err)
	require.EqualValues(t, 2, good.served.Load(), "the claim went straight to the survivor")

	// A refusal that is the request's own (400, 401, 409, 500) is not
	// failed over.
	bad := newReplica(t, http.StatusConflict)
	c = failoverClient(bad.srv.URL, good.srv.URL)
	_, err = c.Renew(ctx, ref)
	require.Equal(t, http.StatusConflict, StatusOf(err))
	require.Equal(t, bad.srv.URL, c.Current().URL)

	// Every server down: the last failure, still retryable.
	draining2 := newReplica(t, http.StatusServiceUnavailable)
	c = failoverClient(dead.srv.URL, draining2.srv.URL)
	_, err = c.Renew(ctx, ref)
	require.Error(t, err)
	require.True(t, Retryable(err), "%v", err)
}

// TestFailoverRenewalNotBehindClaim: a server that accepts connections and
// never answers (a dropped network) holds a long-poll claim; a renewal with
// a deadline gives that server only its share, moves on to the survivor,
// and abandons the stuck claim, which is sent again to the survivor.
func TestFailoverRenewalNotBehindClaim(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() { // accept and never answer
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	good := newReplica(t, 0)
	c := failoverClient("http://"+ln.Addr().String(), good.srv.URL)

	claimDone := make(chan error, 1)
	go func() {
		_, err := c.Claim(context.Background(), 30, "r1")
		claimDone <- err
	}()
	time.Sleep(100 * time.Millisecond) // the claim is on the silent server
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.Renew(rctx, ref)
	require.NoError(t, err, "the renewal reached the survivor within its deadline")
	require.NotNil(t, resp)
	require.Equal(t, good.srv.URL, c.Current().URL)
	select {
	case err := <-claimDone:
		require.NoError(t, err, "the abandoned claim was answered by the survivor")
	case <-time.After(10 * time.Second):
		t.Fatal("the claim stayed on the silent server")
	}
	require.EqualValues(t, 2, good.served.Load())
}

// TestFailoverOneServer: BaseURL alone behaves as before: a refused
// connection is the caller's retryable error.
func TestFailoverOneServer(t *testing.T) {
	dead := newReplica(t, 0)
	dead.srv.Close()
	_, priv, _ := ed25519.GenerateKey(nil)
	c := &RunnerClient{BaseURL: dead.srv.URL, RunnerID: "rnr_1", Key: priv}
	_, err := c.Heartbeat(context.Background(), protocol.HeartbeatRequest{Status: "idle"})
	require.True(t, Retryable(err), "%v", err)
	require.Equal(t, dead.srv.URL, c.Current().URL)
}
