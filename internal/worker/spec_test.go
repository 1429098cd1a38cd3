package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/process"
	"github.com/jobplane/jobplane/internal/protocol"
)

// recording is an executor that records each Spec and runs nothing.
type recording struct {
	executor.Executor
	mu    sync.Mutex
	specs []executor.Spec
}

func (r *recording) Start(ctx context.Context, spec *executor.Spec) (executor.Job, error) {
	r.mu.Lock()
	r.specs = append(r.specs, *spec)
	r.mu.Unlock()
	return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: context.Canceled}
}

// TestSpecCarriesTheRunBlock: the claim's tenant and run block (image,
// resources, network, workdir) reach the executor.
func TestSpecCarriesTheRunBlock(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "true")
	a.Tenant = "acme"
	a.Job.Image, a.Job.Network, a.Job.Workdir = "registry.example/build:1", "none", "sub"
	a.Job.Resources = &protocol.AssignedResources{CPUMillis: 500, MemoryBytes: 64 << 20}
	b.srv.enqueue(a)
	rec := &recording{Executor: process.New(process.Options{})}
	cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
	cfg.Executor = rec
	startWorker(t, cfg)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.specs, 1)
	s := rec.specs[0]
	require.Equal(t, "acme", s.Tenant)
	require.Equal(t, a.AttemptID, s.Attempt)
	require.Equal(t, "registry.example/build:1", s.Image)
	require.Equal(t, "none", s.Network)
	require.Equal(t, "sub", s.Workdir)
	require.Equal(t, executor.Resources{MilliCPU: 500, MemoryBytes: 64 << 20}, s.Resources)
}

// ownFiles is an executor whose side fetches the source and uploads the
// artifacts (as the Kubernetes executor's pod does): it records each Spec
// and ends each job at once, reporting one stored artifact.
type ownFiles struct {
	recording
}

func (o *ownFiles) Capabilities() executor.Capabilities {
	return executor.Capabilities{Images: true, Isolated: true, OwnFiles: true}
}

func (o *ownFiles) Start(ctx context.Context, spec *executor.Spec) (executor.Job, error) {
	o.mu.Lock()
	o.specs = append(o.specs, *spec)
	o.mu.Unlock()
	return ended{executor.Exit{Code: 0, Summary: "exit status 0", Artifacts: []string{"art_from_the_pod"}}}, nil
}

type ended struct{ exit executor.Exit }

func (ended) Extend(time.Time)      {}
func (ended) Stop(time.Duration)    {}
func (e ended) Wait() executor.Exit { return e.exit }

// TestOwnFilesExecutor: for an executor with Capabilities.OwnFiles the
// worker neither fetches the source (the fake server has no source route:
// a fetch would fail the attempt before the job starts) nor uploads; it
// hands the source and the declared artifacts to the executor and reports
// the artifacts the executor's side stored.
func TestOwnFilesExecutor(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "true")
	a.Source = &protocol.SourceDescriptor{Repo: "code", Commit: "0123456789012345678901234567890123456789"}
	a.Artifacts = []protocol.ArtifactSpec{{Name: "out.txt", Role: "report", MaxBytes: 1000}}
	b.srv.enqueue(a)
	x := &ownFiles{recording: recording{Executor: process.New(process.Options{})}}
	cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
	cfg.Executor = x
	startWorker(t, cfg)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
	x.mu.Lock()
	require.Len(t, x.specs, 1)
	s := x.specs[0]
	x.mu.Unlock()
	require.Equal(t, &executor.Source{Repo: "code", Commit: a.Source.Commit}, s.Source)
	require.Equal(t, []executor.Artifact{{Name: "out.txt", Role: "report", MaxBytes: 1000}}, s.Artifacts)
	b.srv.mu.Lock()
	res := b.srv.results[a.AttemptID][0]
	b.srv.mu.Unlock()
	require.Equal(t, "succeeded", res.Outcome)
	require.Equal(t, []string{"art_from_the_pod"}, res.Artifacts)
}
