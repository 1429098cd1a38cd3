package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestConnectionLossIsRetryable terminates the server's PostgreSQL backends
// (pg_terminate_backend, SQLSTATE 57P01) again and again while clients
// request runs and runners claim, renew and post results: every refusal is
// 503 with Retry-After, none is 500.
func TestConnectionLossIsRetryable(t *testing.T) {
	t.Parallel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	app := "jp_connloss_" + hex.EncodeToString(b[:])
	dsn := testdb.PostgresDSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	srv, admin, _ := startObsServer(t, dsn+sep+"application_name="+app)
	ctx := context.Background()
	// The runners' exchanges and the probe's are checked against the
	// OpenAPI document: a 503 must be the documented one.
	hc := openapitest.Client(t, &http.Client{Timeout: 30 * time.Second})

	killer, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer killer.Close(context.Background())

	var mu sync.Mutex
	statuses := map[int]int{}
	var noRetryAfter []string
	note := func(what string, err error) {
		if err == nil {
			return
		}
		st := apiclient.StatusOf(err)
		mu.Lock()
		defer mu.Unlock()
		statuses[st]++
		if st >= 500 {
			t.Logf("%s: %d %v", what, st, err)
		}
	}
	// Retry-After on 503 is checked on the raw answers of one client.
	probe := func() {
		resp, err := hc.Get(srv.URL() + "/v1/runs?limit=5")
		if err != nil {
			return
		}
		defer resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			noRetryAfter = append(noRetryAfter, resp.Request.URL.Path)
		}
	}

	runners := make([]*apiclient.RunnerClient, 3)
	for i := range runners {
		tok, err := admin.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default"})
		require.NoError(t, err)
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		rc := &apiclient.RunnerClient{BaseURL: srv.URL(), Key: priv, HTTP: hc, Clock: clock.Real{}}
		reg, err := rc.Register(ctx, tok.Token, protocol.RegisterRequest{Name: "r", PublicKey: protocol.EncodeKey(pub)})
		require.NoError(t, err)
		rc.RunnerID = reg.RunnerID
		runners[i] = rc
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var killed atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			var n int64
			if err := killer.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err == nil {
				killed.Add(n)
			}
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := admin.CreateRun(ctx, &protocol.RunRequest{Job: "greet", Channel: "prod"})
				note("request run", err)
				probe()
			}
		}()
	}
	for _, rc := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				asg, err := rc.Claim(ctx, 1, "")
				note("claim", err)
				if asg == nil {
					continue
				}
				ref := apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}
				_, err = rc.Renew(ctx, ref)
				note("renew", err)
				_, err = rc.Result(ctx, ref, protocol.ResultRequest{Outcome: "succeeded", Summary: "ok", RequestID: asg.AttemptID})
				note("result", err)
			}
		}()
	}
	time.Sleep(6 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("backends terminated: %d; refusals by status: %v", killed.Load(), statuses)
	require.Positive(t, killed.Load(), "no backend was terminated: the test tested nothing")
	require.Zero(t, statuses[http.StatusInternalServerError], "a lost connection was answered 500")
	require.Empty(t, noRetryAfter, "503 without Retry-After")
}
