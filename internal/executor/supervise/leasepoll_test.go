package supervise

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

// leaseServer answers GET /v1/run/lease for one attempt as the server
// would: the test moves the expiry (a renewal) or ends the attempt.
type leaseServer struct {
	srv *httptest.Server

	mu      sync.Mutex
	expires time.Time
	ended   bool
	polls   int
}

func newLeaseServer(t *testing.T, expires time.Time) *leaseServer {
	l := &leaseServer{expires: expires}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.polls++
		problem := func(status int, code string) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(protocol.Problem{Status: status, Code: code})
		}
		switch {
		case r.URL.Path != "/v1/run/lease" || r.Header.Get("Authorization") != "Bearer a.b.c":
			problem(401, protocol.CodeUnauthorized)
			return
		case r.URL.Query().Get("attempt") != "att-1":
			problem(403, protocol.CodeForbidden)
			return
		case l.ended:
			problem(410, protocol.CodeAttemptEnded)
			return
		}
		now := time.Now()
		_ = json.NewEncoder(w).Encode(protocol.RunLease{AttemptID: "att-1", State: "leased", ExpiresAt: l.expires,
			ServerTime: now, RemainingMS: l.expires.Sub(now).Milliseconds(), TTLSeconds: 2})
	}))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *leaseServer) set(expires time.Time, ended bool) {
	l.mu.Lock()
	l.expires, l.ended = expires, ended
	l.mu.Unlock()
}

func (l *leaseServer) env() []string {
	return []string{"PATH=/usr/bin:/bin", protocol.EnvAPI + "=" + l.srv.URL, protocol.EnvRunToken + "=a.b.c", protocol.EnvAttemptID + "=att-1"}
}

// TestLeasePollFollowsRenewalsAndBoundsTheJob: the supervisor learns each
// renewal from the server and, once renewals stop, kills the job before the
// last expiry it confirmed (by the 1 s margin of a 2 s lease).
func TestLeasePollFollowsRenewalsAndBoundsTheJob(t *testing.T) {
	t.Parallel()
	began := time.Now()
	l := newLeaseServer(t, began.Add(2*time.Second))
	s := start(t, Options{UntilMS: -1, LeasePoll: true, LeasePollMS: 100}, l.env(), "sleep", "60")
	var last time.Time
	for time.Since(began) < 4*time.Second {
		last = time.Now().Add(2 * time.Second)
		l.set(last, false)
		select {
		case <-s.done:
			t.Fatalf("the job ended while the lease was renewed: %s", s.out.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	st := s.exit(t)
	ended := time.Now()
	require.Equal(t, ReasonLeaseBound, st.Reason, s.out.String())
	require.Equal(t, 137, st.Code)
	require.True(t, ended.Before(last), "the job ended %v after the last expiry the server confirmed", ended.Sub(last))
	require.Contains(t, s.out.String(), "no later lease expiry confirmed")
	t.Logf("job gone %v before the lease's expiry", last.Sub(ended))
}

func TestLeasePollEndedAttemptKillsAtOnce(t *testing.T) {
	t.Parallel()
	l := newLeaseServer(t, time.Now().Add(time.Minute))
	s := start(t, Options{UntilMS: -1, LeasePoll: true, LeasePollMS: 100}, l.env(), "sh", "-c", "echo ready; sleep 60")
	require.Eventually(t, func() bool { return strings.Contains(s.out.String(), "ready") }, 10*time.Second, 10*time.Millisecond)
	l.set(time.Now().Add(time.Minute), true)
	st := s.exit(t)
	require.Equal(t, ReasonLeaseEnded, st.Reason)
	require.Equal(t, 137, st.Code)
}

func TestLeasePollRefusesToStart(t *testing.T) {
	t.Parallel()
	l := newLeaseServer(t, time.Now().Add(time.Minute))
	l.set(time.Now().Add(time.Minute), true)
	marker := filepath.Join(t.TempDir(), "ran")
	// A refusal is final even with a fallback bound; a missing token is
	// final without one.
	cases := map[string]struct {
		env   []string
		until int64
	}{
		"ended attempt": {l.env(), 60_000},
		"no run token":  {[]string{"PATH=/usr/bin:/bin", protocol.EnvAPI + "=" + l.srv.URL, protocol.EnvAttemptID + "=att-1"}, -1},
		"wrong token":   {[]string{"PATH=/usr/bin:/bin", protocol.EnvAPI + "=" + l.srv.URL, protocol.EnvRunToken + "=x.y.z", protocol.EnvAttemptID + "=att-1"}, 60_000},
		"other attempt": {[]string{"PATH=/usr/bin:/bin", protocol.EnvAPI + "=" + l.srv.URL, protocol.EnvRunToken + "=a.b.c", protocol.EnvAttemptID + "=att-2"}, 60_000},
	}
	for name, c := range cases {
		s := start(t, Options{UntilMS: c.until, LeasePoll: true}, c.env, "touch", marker)
		<-s.done
		first, ok := <-s.statuses
		require.True(t, ok, name)
		require.Equal(t, "start_failed", first.Event, name)
		require.Equal(t, codeStartFailed, s.cmd.ProcessState.ExitCode(), name)
		_, err := os.Stat(marker)
		require.True(t, os.IsNotExist(err), "%s: the job ran", name)
	}
}

// TestLeasePollFallsBackToUntil: a server that cannot be reached at the
// start leaves the job under -until-ms.
func TestLeasePollFallsBackToUntil(t *testing.T) {
	t.Parallel()
	env := []string{"PATH=/usr/bin:/bin", protocol.EnvAPI + "=http://127.0.0.1:1", protocol.EnvRunToken + "=a.b.c", protocol.EnvAttemptID + "=att-1"}
	began := time.Now()
	s := start(t, Options{UntilMS: 500, LeasePoll: true, LeasePollMS: 100}, env, "sleep", "60")
	st := s.exit(t)
	require.Equal(t, ReasonLeaseBound, st.Reason, s.out.String())
	require.GreaterOrEqual(t, time.Since(began), 500*time.Millisecond)
}

func TestInstall(t *testing.T) {
	t.Parallel()
	dst := filepath.Join(t.TempDir(), "jobplane")
	var out strings.Builder
	require.Equal(t, 0, Main([]string{"-install", dst}, &out), out.String())
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	self, err := os.Stat("/proc/self/exe")
	require.NoError(t, err)
	require.Equal(t, self.Size(), fi.Size())
	require.NotZero(t, fi.Mode()&0o111)
}
