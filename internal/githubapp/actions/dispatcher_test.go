package actions_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
)

// TestActionsDispatcherRefusalReasons: GitHub's refusals of a dispatch
// become the reasons the run and its Check Run show — a 403 (the App
// lacks Actions: write on the repository) and a 404 — while a 5xx stays
// retryable. A proxy in front of the fake GitHub gives the 403 and 502.
func TestActionsDispatcherRefusalReasons(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	key := fakegithub.Key(t, 0)
	f := fakegithub.New(t, fakegithub.Options{AppID: 9, PublicKey: &key.PublicKey, Clock: fc})
	f.AddInstallation(1, "acme", github.Permissions{"metadata": "read", "actions": "write"})
	dir, _ := fakegithub.InitRepo(t, map[string]string{"README": "x"})
	f.AddRepo(1, "app", dir)
	f.AddWorkflow(fakegithub.Workflow{Repo: "acme/app", File: "jobplane.yml", Inputs: []string{actions.InputRun}})
	var answer atomic.Int32
	target, err := url.Parse(f.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code := int(answer.Load()); code != 0 && strings.HasSuffix(r.URL.Path, "/dispatches") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = w.Write([]byte(`{"message":"Resource not accessible by integration"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	app, err := github.New(github.Config{AppID: 9, PrivateKey: key, BaseURL: front.URL, Clock: fc})
	require.NoError(t, err)
	d := actions.Dispatcher{App: app}
	ctx := context.Background()
	in := map[string]string{actions.InputRun: "run_x"}

	target2, err := d.DispatchWorkflow(ctx, 1, "acme/app", "jobplane.yml", in)
	require.NoError(t, err)
	require.Equal(t, "refs/heads/main", target2.Ref)

	var refusal *actions.Refusal
	answer.Store(http.StatusForbidden)
	_, err = d.DispatchWorkflow(ctx, 1, "acme/app", "jobplane.yml", in)
	require.ErrorAs(t, err, &refusal)
	require.Equal(t, "the installation lacks the Actions: write permission (403)", refusal.Reason)

	answer.Store(0)
	_, err = d.DispatchWorkflow(ctx, 1, "acme/app", "missing.yml", in)
	require.ErrorAs(t, err, &refusal)
	require.Equal(t, "no such workflow (404)", refusal.Reason)

	answer.Store(http.StatusBadGateway)
	_, err = d.DispatchWorkflow(ctx, 1, "acme/app", "jobplane.yml", in)
	require.Error(t, err)
	require.False(t, errors.As(err, &refusal), "a 5xx is retried, not a refusal")
}
