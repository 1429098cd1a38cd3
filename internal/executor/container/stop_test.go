package container

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/executor"
)

func TestStopGraceful(t *testing.T) {
	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", `trap 'echo term; exit 5' TERM; echo ready; while :; do sleep 0.1; done`)
	j := h.start(t, spec)
	waitFor(t, "ready", func() bool { return contains(o.get("stdout"), "ready") })
	j.Stop(20 * time.Second)
	exit := j.Wait()
	require.Equal(t, 5, exit.Code, "%+v", exit)
	require.Equal(t, []string{"ready", "term"}, o.get("stdout"))
}

func TestStopKillsAfterGrace(t *testing.T) {
	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.1; done`)
	spec.Resources.MemoryBytes = 256 << 20 // a kill on request is not out of memory
	j := h.start(t, spec)
	waitFor(t, "ready", func() bool { return contains(o.get("stdout"), "ready") })
	began := time.Now()
	j.Stop(500 * time.Millisecond)
	exit := j.Wait()
	require.Equal(t, 137, exit.Code, "%+v", exit)
	require.Empty(t, exit.Reason)
	require.GreaterOrEqual(t, time.Since(began), 500*time.Millisecond)
}

func TestLeaseBoundEndsJob(t *testing.T) {
	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", `echo ready; sleep 60`)
	spec.Until = time.Now().Add(4 * time.Second)
	j := h.start(t, spec)
	exit := j.Wait()
	require.Equal(t, 137, exit.Code, "%+v", exit)
	require.False(t, time.Now().Before(spec.Until), "ended at the bound, not before")
	require.Contains(t, exit.Summary, "SIGKILL")
}

func TestExtendMovesBound(t *testing.T) {
	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", `sleep 5; echo done`)
	spec.Until = time.Now().Add(3 * time.Second)
	j := h.start(t, spec)
	j.Extend(time.Now().Add(time.Minute))
	exit := j.Wait()
	require.Equal(t, 0, exit.Code, "%+v", exit)
	require.Equal(t, []string{"done"}, o.get("stdout"))
}

func TestSweepRemovesUnheldAttempts(t *testing.T) {
	h := newHarness(t)
	oa, ob := &output{}, &output{}
	a := h.spec(t, oa, "sh", "-c", `echo ready; sleep 60`)
	b := h.spec(t, ob, "sh", "-c", `echo ready; sleep 60`)
	other := h.spec(t, &output{}, "sh", "-c", `sleep 60`)
	other.Runner = h.runner + "-other"
	ja, jb, jo := h.start(t, a), h.start(t, b), h.start(t, other)
	waitFor(t, "both ready", func() bool { return contains(oa.get("stdout"), "ready") && contains(ob.get("stdout"), "ready") })

	// A restarted worker: a new executor, holding b only.
	x := h.executor(t)
	require.NoError(t, x.Sweep(context.Background(), h.runner, func(att string) bool { return att == b.Attempt }))
	exitA := ja.Wait()
	require.NotEqual(t, 0, exitA.Code, "%+v", exitA)
	names := h.eng.Containers(t, LabelRunner, h.runner)
	require.Equal(t, []string{"/" + ContainerName(b.Runner, b.Attempt)}, names, "the held attempt's container stays")
	require.Len(t, h.eng.Containers(t, LabelRunner, other.Runner), 1, "another runner's container is not touched")

	jb.Stop(0)
	jo.Stop(0)
	require.Equal(t, 137, jb.Wait().Code)
	jo.Wait()
	require.Empty(t, h.eng.Containers(t, LabelRunner, other.Runner))
	_ = strings.TrimSpace
	_ = executor.NetworkNone
}
