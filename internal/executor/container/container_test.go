package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/containertest"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/id"
)

// harness is one test's engine, image and executor.
type harness struct {
	eng        *containertest.Engine
	x          *Executor
	image      string
	runner     string
	supervisor string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	eng := containertest.Start(t)
	h := &harness{eng: eng, runner: "r-" + strings.ToLower(id.Secret(8)), supervisor: containertest.Supervisor(t)}
	// A tag may not begin with '-' or '_', which a secret may.
	h.image = containertest.BusyboxImage(t, "localhost/jobplane-test-busybox:t"+strings.ToLower(id.Secret(6)))
	h.x = h.executor(t)
	t.Cleanup(func() {
		require.Empty(t, eng.Containers(t, LabelRunner, h.runner), "no container is left behind")
	})
	return h
}

func (h *harness) executor(t *testing.T) *Executor {
	t.Helper()
	var ul []Ulimit
	for _, s := range containertest.Ulimits {
		u, err := ParseUlimit(s)
		require.NoError(t, err)
		ul = append(ul, u)
	}
	x, err := New(Config{Client: h.eng.Client, Image: h.image, Supervisor: h.supervisor, Ulimits: ul, Clock: clock.Real{}})
	require.NoError(t, err)
	return x
}

// output collects a job's lines per stream.
type output struct {
	mu    sync.Mutex
	lines map[string][]string
}

func (o *output) add(stream, line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lines == nil {
		o.lines = map[string][]string{}
	}
	o.lines[stream] = append(o.lines[stream], line)
}

func (o *output) get(stream string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lines[stream]...)
}

// layout makes an attempt directory as the worker does, under dir.
func layout(t *testing.T, dir string) executor.Layout {
	t.Helper()
	l := executor.Layout{Root: dir, Workspace: filepath.Join(dir, "workspace"), Artifacts: filepath.Join(dir, "artifacts"),
		ParamsFile: filepath.Join(dir, "params.json")}
	require.NoError(t, os.MkdirAll(l.Workspace, 0o700))
	require.NoError(t, os.MkdirAll(l.Artifacts, 0o700))
	require.NoError(t, os.WriteFile(l.ParamsFile, []byte(`{"who":"you"}`), 0o600))
	return l
}

func (h *harness) spec(t *testing.T, o *output, command ...string) *executor.Spec {
	t.Helper()
	return &executor.Spec{
		Runner: h.runner, Tenant: "t1", Run: "run-" + id.Secret(6), Attempt: "att-" + id.Secret(6), Job: "job", AttemptNumber: 1,
		Command: command, Env: []string{"PATH=/usr/local/sbin:/host/bin", "JOBPLANE_RUN_TOKEN=tok-s3cr3t-value"},
		Layout: layout(t, t.TempDir()), Until: time.Now().Add(time.Minute), Network: executor.NetworkDefault, Output: o.add,
	}
}

func (h *harness) start(t *testing.T, spec *executor.Spec) executor.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := h.x.Start(ctx, spec)
	require.NoError(t, err)
	return j
}

// inspectRaw is the engine's record of spec's container.
func (h *harness) inspectRaw(t *testing.T, spec *executor.Spec) string {
	t.Helper()
	res, err := h.eng.Client.ContainerInspect(context.Background(), ContainerName(spec.Runner, spec.Attempt), client.ContainerInspectOptions{})
	require.NoError(t, err)
	return string(res.Raw)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 60*time.Second, 20*time.Millisecond, what)
}

func TestRunsJobInItsContainer(t *testing.T) {
	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", `
for i in 1 2 3 4 5 6 7 8 9 10; do echo "out $i"; echo "err $i" >&2; done
echo "token-length=${#JOBPLANE_RUN_TOKEN} path=$PATH home=$HOME tmp=$TMPDIR pwd=$(pwd)"
cat /jobplane/params.json; echo
cat input.txt
echo made > /jobplane/artifacts/out.txt
echo ready
while [ ! -e go ]; do sleep 0.05; done
exit 3`)
	require.NoError(t, os.WriteFile(filepath.Join(spec.Layout.Workspace, "input.txt"), []byte("from the source\n"), 0o644))
	j := h.start(t, spec)
	waitFor(t, "the job is ready", func() bool { return contains(o.get("stdout"), "ready") })
	raw := h.inspectRaw(t, spec)
	require.NotContains(t, raw, "s3cr3t", "the run token is not in the engine's record of the container")
	require.Contains(t, raw, LabelAttempt)
	require.NoError(t, os.WriteFile(filepath.Join(spec.Layout.Workspace, "go"), nil, 0o644))
	exit := j.Wait()
	require.Equal(t, executor.Exit{Code: 3, Summary: "exit status 3"}, exit)

	var wantOut, wantErr []string
	for i := 1; i <= 10; i++ {
		wantOut = append(wantOut, fmt.Sprintf("out %d", i))
		wantErr = append(wantErr, fmt.Sprintf("err %d", i))
	}
	wantOut = append(wantOut,
		"token-length=16 path=/bin home=/jobplane/home tmp=/jobplane/tmp pwd=/jobplane/workspace",
		`{"who":"you"}`, "from the source", "ready")
	require.Equal(t, wantOut, o.get("stdout"), "stdout in order, apart from stderr")
	require.Equal(t, wantErr, o.get("stderr"))
	b, err := os.ReadFile(filepath.Join(spec.Layout.Artifacts, "out.txt"))
	require.NoError(t, err)
	require.Equal(t, "made\n", string(b), "the artifact is back on the host")
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

func TestMissingImage(t *testing.T) {
	h := newHarness(t)
	for _, pull := range []string{PullMissing, PullNever} {
		t.Run(pull, func(t *testing.T) {
			x := h.executor(t)
			x.cfg.Pull = pull
			o := &output{}
			spec := h.spec(t, o, "true")
			spec.Image = "localhost:1/jobplane-no-such-image:1"
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := x.Start(ctx, spec)
			var se *executor.StartError
			require.True(t, errors.As(err, &se), "%v", err)
			require.Equal(t, executor.ReasonImageMissing, se.Reason, se.Error())
			require.Contains(t, se.Error(), "jobplane-no-such-image")
			t.Log(se.Error())
		})
	}
}

func TestNoImage(t *testing.T) {
	h := newHarness(t)
	x := h.executor(t)
	x.cfg.Image = ""
	_, err := x.Start(context.Background(), h.spec(t, &output{}, "true"))
	var se *executor.StartError
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, executor.ReasonStartFailed, se.Reason)
}

func TestWorkdirAndMissingCommand(t *testing.T) {
	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", "pwd")
	spec.Workdir = "/etc"
	require.Equal(t, 0, h.start(t, spec).Wait().Code)
	require.Equal(t, []string{"/etc"}, o.get("stdout"), "an absolute workdir is the image's")

	o = &output{}
	spec = h.spec(t, o, "sh", "-c", "pwd")
	require.NoError(t, os.MkdirAll(filepath.Join(spec.Layout.Workspace, "sub", "dir"), 0o700))
	spec.Workdir = "sub/dir"
	require.Equal(t, 0, h.start(t, spec).Wait().Code)
	require.Equal(t, []string{"/jobplane/workspace/sub/dir"}, o.get("stdout"), "a relative workdir is in the workspace")

	spec = h.spec(t, &output{}, "true")
	spec.Workdir = "../../etc"
	_, err := h.x.Start(context.Background(), spec)
	var se *executor.StartError
	require.True(t, errors.As(err, &se), "%v", err)

	o = &output{}
	exit := h.start(t, h.spec(t, o, "no-such-command")).Wait()
	require.Equal(t, 127, exit.Code, "%+v", exit)
	require.Contains(t, strings.Join(o.get("stderr"), "\n"), "no-such-command")
}
