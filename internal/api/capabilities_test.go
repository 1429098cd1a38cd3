package api_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// capabilityDefinitions add a job that runs an image and one that must be
// isolated to the test definitions.
func capabilityDefinitions() map[string]string {
	files := maps.Clone(testDefinitions)
	files["jobs/boxed.yaml"] = "name: boxed\ndescription: In an image\nrun:\n  command: [\"true\"]\n  image: busybox:1.36\n"
	files["jobs/guarded.yaml"] = "name: guarded\ndescription: Isolated\nisolation: required\nrun:\n  command: [\"true\"]\n"
	// Limits without an image: only a container or a pod enforces them.
	files["jobs/limited.yaml"] = "name: limited\ndescription: Limited\nrun:\n  command: [\"true\"]\n  resources: {memory: 64Mi}\n  network: none\n"
	files["policies/main.yaml"] = strings.Replace(files["policies/main.yaml"], "jobs: [echo, flaky, gpu]", "jobs: [echo, flaky, gpu, boxed, guarded, limited]", 1)
	return files
}

// runnerWith registers a runner that states executor and caps (nil:
// states nothing, as a runner that predates them).
func (e *testEnv) runnerWith(executor string, caps *protocol.Capabilities) *apiclient.RunnerClient {
	e.t.Helper()
	tok, err := e.admin.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{Pool: "default"})
	require.NoError(e.t, err)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(e.t, err)
	rc := &apiclient.RunnerClient{BaseURL: e.srv.URL, Key: priv, HTTP: e.srv.Client(), Clock: e.clock}
	resp, err := rc.Register(e.ctx(), tok.Token, protocol.RegisterRequest{Name: executor, PublicKey: protocol.EncodeKey(pub),
		Executor: executor, Capabilities: caps})
	require.NoError(e.t, err)
	rc.RunnerID = resp.RunnerID
	return rc
}

// TestClaimMatchesExecutorCapabilities: a run is handed only to a runner
// whose executor can run it; until one is online its waiting_for says what
// it waits for; a runner that states nothing is a process runner without
// isolation and still gets the runs it can run; the runners list shows
// each runner's executor.
func TestClaimMatchesExecutorCapabilities(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, capabilityDefinitions())
		old := e.runnerWith("", nil)
		boxed := e.request("boxed", "")
		guarded := e.request("guarded", "")
		limited := e.request("limited", "")
		asg, err := old.Claim(e.ctx(), 0, "")
		require.NoError(t, err)
		require.Nil(t, asg, "a process runner without isolation was handed a run it cannot run")
		require.Equal(t, "runner: none of the 1 online runners is eligible (needs pool default, a runner that can run images (run.image))",
			e.run(boxed.ID).WaitingFor)
		require.Equal(t, "runner: none of the 1 online runners is eligible (needs pool default, a runner that can run images (run.resources, run.network: none))",
			e.run(limited.ID).WaitingFor)
		require.Equal(t, "runner: none of the 1 online runners is eligible (needs pool default, an isolated runner (isolation: required))",
			e.run(guarded.ID).WaitingFor)

		// A process runner with a job user is isolated: the isolated run
		// is its to take, the image run still waits.
		jobUser := e.runnerWith("process", &protocol.Capabilities{Isolated: true})
		require.Empty(t, e.run(guarded.ID).WaitingFor, "an eligible runner is online")
		asg, err = jobUser.Claim(e.ctx(), 0, "")
		require.NoError(t, err)
		require.NotNil(t, asg)
		require.Equal(t, guarded.ID, asg.RunID)
		require.Equal(t, "runner: none of the 2 online runners is eligible (needs pool default, a runner that can run images (run.image))",
			e.run(boxed.ID).WaitingFor)

		// The old runner still gets what a process runner can run.
		echo := e.request("echo", "")
		asg, err = old.Claim(e.ctx(), 0, "")
		require.NoError(t, err)
		require.NotNil(t, asg)
		require.Equal(t, echo.ID, asg.RunID)

		// Both were requested at the same instant: either may come first.
		container := e.runnerWith("container", &protocol.Capabilities{Images: true, Isolated: true})
		claimed := map[string]*protocol.Assignment{}
		for range 2 {
			asg, err = container.Claim(e.ctx(), 0, "")
			require.NoError(t, err)
			require.NotNil(t, asg)
			claimed[asg.RunID] = asg
		}
		require.Contains(t, claimed, boxed.ID)
		require.Contains(t, claimed, limited.ID)
		require.Equal(t, &protocol.AssignedResources{MemoryBytes: 64 << 20}, claimed[limited.ID].Job.Resources)
		require.Equal(t, "none", claimed[limited.ID].Job.Network)

		list, err := e.admin.ListRunners(e.ctx())
		require.NoError(t, err)
		got := map[string]string{}
		for _, r := range list.Runners {
			got[r.ID] = r.Executor + " (" + r.Capabilities.String() + ")"
		}
		require.Equal(t, map[string]string{
			old.RunnerID: "process (not isolated)", jobUser.RunnerID: "process (isolated)", container.RunnerID: "container (isolated, images)",
		}, got)
	})
}

// TestLongPollClaimWaitsForCapableWork: runners of different capabilities
// long-poll at once; the run that needs images goes to the one that can
// run them as soon as it is requested, and the others are handed nothing.
func TestLongPollClaimWaitsForCapableWork(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, capabilityDefinitions())
		process := e.runnerWith("process", nil)
		jobUser := e.runnerWith("process", &protocol.Capabilities{Isolated: true})
		container := e.runnerWith("container", &protocol.Capabilities{Images: true, Isolated: true})
		type answer struct {
			asg *protocol.Assignment
			err error
			at  time.Time
		}
		answers := make([]answer, 3)
		var wg sync.WaitGroup
		for i, rc := range []*apiclient.RunnerClient{process, jobUser, container} {
			wg.Go(func() {
				// Wall time on purpose: the long poll's wait is real time.
				asg, err := rc.Claim(e.ctx(), 4, "")
				answers[i] = answer{asg, err, time.Now()}
			})
		}
		// Each waits in the line of its own capabilities.
		require.Eventually(t, func() bool { return e.svc.ClaimsWaiting() == 3 }, 10*time.Second, 10*time.Millisecond)
		boxed := e.request("boxed", "")
		requested := time.Now()
		wg.Wait()
		for i, a := range answers[:2] {
			require.NoError(t, a.err)
			require.Nil(t, a.asg, "runner %d was handed a run that needs images", i)
		}
		require.NoError(t, answers[2].err)
		require.NotNil(t, answers[2].asg, "the container runner's long poll got nothing")
		require.Equal(t, boxed.ID, answers[2].asg.RunID)
		require.Less(t, answers[2].at.Sub(requested), 3*time.Second, "the capable runner was not woken by the request")
	})
}

// TestRunnerCapabilityInputRefused: a malformed executor or capabilities,
// at registration or in a heartbeat, is 400 bad_request and changes
// nothing; a heartbeat that states a new executor is recorded and audited.
func TestRunnerCapabilityInputRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, capabilityDefinitions())
		rc := e.runnerWith("process", nil)
		bad := []string{
			`"executor":"Container"`, `"executor":"-x"`, `"executor":"` + strings.Repeat("a", 33) + `"`, `"executor":7`,
			`"executor":"a b"`, `"executor":"é"`,
			`"capabilities":{"images":"yes"}`, `"capabilities":{"gpu":true}`, `"capabilities":[]`, `"capabilities":true`,
		}
		for _, field := range bad {
			tok, err := e.admin.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{})
			require.NoError(t, err)
			_, pub := mustKey(t)
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/runner/register",
				strings.NewReader(`{"name":"x","public_key":"`+protocol.EncodeKey(pub)+`",`+field+`}`))
			req.Header.Set("Authorization", "Bearer "+tok.Token)
			code, pc := e.send(req)
			require.Equal(t, 400, code, "register with %s", field)
			require.Equal(t, protocol.CodeBadRequest, pc, "register with %s", field)

			code, pc = e.send(e.signedRequest(rawSigned{Path: "/v1/runner/heartbeat", Runner: rc.RunnerID, Key: rc.Key,
				Body: []byte(`{"status":"idle",` + field + `}`)}))
			require.Equal(t, 400, code, "heartbeat with %s", field)
			require.Equal(t, protocol.CodeBadRequest, pc, "heartbeat with %s", field)
		}
		rn, err := st.RunnerGetByID(e.ctx(), rc.RunnerID, false)
		require.NoError(t, err)
		require.Equal(t, "process", rn.Executor)
		require.Zero(t, rn.Capabilities)

		// A heartbeat states another executor: the next claim sees it.
		boxed := e.request("boxed", "")
		asg, err := rc.Claim(e.ctx(), 0, "")
		require.NoError(t, err)
		require.Nil(t, asg)
		_, err = rc.Heartbeat(e.ctx(), protocol.HeartbeatRequest{Status: "idle", Executor: "container",
			Capabilities: &protocol.Capabilities{Images: true, Isolated: true}})
		require.NoError(t, err)
		asg, err = rc.Claim(e.ctx(), 0, "")
		require.NoError(t, err)
		require.NotNil(t, asg)
		require.Equal(t, boxed.ID, asg.RunID)
		// A heartbeat without the fields is a process runner again.
		_, err = rc.Heartbeat(e.ctx(), protocol.HeartbeatRequest{Status: "busy", Attempts: []string{asg.AttemptID}})
		require.NoError(t, err)
		rn, err = st.RunnerGetByID(e.ctx(), rc.RunnerID, false)
		require.NoError(t, err)
		require.Equal(t, "process", rn.Executor)
		require.Zero(t, rn.Capabilities)
		evs, err := st.AuditList(e.ctx(), &store.AuditListParams{Tenant: rn.Tenant, Limit: 1000})
		require.NoError(t, err)
		changes := 0
		for _, ev := range evs {
			if ev.Action == "runner.executor_changed" && ev.Subject == rc.RunnerID {
				changes++
			}
		}
		require.Equal(t, 2, changes)
	})
}

// TestLongPollClaimRechecksCapabilities: a container runner's claim waits;
// meanwhile the runner re-heartbeats as a process runner without
// isolation (a worker restarted with another executor). The run that
// needs images, requested then, wakes the waiting claim, which was matched
// with the capabilities stated when it authenticated: it must hand out
// nothing, and the run stays queued and waits for an image runner. In
// batch form too.
func TestLongPollClaimRechecksCapabilities(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		for _, batch := range []bool{false, true} {
			name := "one"
			if batch {
				name = "batch"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnvFiles(t, st, capabilityDefinitions())
				rc := e.runnerWith("container", &protocol.Capabilities{Images: true, Isolated: true})
				answered := waitingClaim(rc, 8, batch)
				require.Eventually(t, func() bool { return e.svc.ClaimsWaiting() == 1 }, 10*time.Second, 10*time.Millisecond)
				_, err := rc.Heartbeat(e.ctx(), protocol.HeartbeatRequest{Status: "idle", Executor: "process", Capabilities: &protocol.Capabilities{}})
				require.NoError(t, err)
				boxed := e.request("boxed", "")
				got := answered(t)
				require.NoError(t, got.err)
				require.Zero(t, got.n, "a runner that no longer runs images was handed a run that needs them")
				r := e.run(boxed.ID)
				require.Equal(t, "queued", r.State)
				for _, a := range r.Attempts {
					require.NotEqual(t, rc.RunnerID, a.Runner, "attempt %s went to the process runner", a.ID)
				}
				// Claimed again, with what it states now: still nothing.
				asg, err := rc.Claim(e.ctx(), 0, "")
				require.NoError(t, err)
				require.Nil(t, asg)
				require.Contains(t, e.run(boxed.ID).WaitingFor, "a runner that can run images")
				// A container runner gets it.
				ctr := e.runnerWith("container", &protocol.Capabilities{Images: true, Isolated: true})
				asg, err = ctr.Claim(e.ctx(), 0, "")
				require.NoError(t, err)
				require.NotNil(t, asg)
				require.Equal(t, boxed.ID, asg.RunID)
				// The next subtest shares the store: it must find no image
				// runner online.
				require.NoError(t, e.admin.DisableRunner(e.ctx(), ctr.RunnerID))
			})
		}
	})
}
