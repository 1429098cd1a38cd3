package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/gitsync"
)

// TestPinnedSpecIsolation checks that the image, resources, network,
// workdir and isolation of a job are pinned into the run's spec.
func TestPinnedSpecIsolation(t *testing.T) {
	t.Parallel()
	cat, errs := catalog.Parse(map[string][]byte{
		"jobs/hello.yaml": []byte("name: hello\nisolation: required\nrun:\n  command: [echo, hi]\n  image: busybox:1.36\n" +
			"  resources: {cpu: 500m, memory: 64Mi}\n  network: none\n  workdir: /work\n"),
		"jobs/plain.yaml": []byte("name: plain\nrun: {command: [echo]}\n"),
	})
	require.Empty(t, errs)
	p := &pinned{snap: &gitsync.Snapshot{Catalog: cat}}

	s, ok := p.Job("hello")
	require.True(t, ok)
	require.Equal(t, "busybox:1.36", s.Image)
	require.Equal(t, &control.SpecResources{CPUMillis: 500, MemoryBytes: 64 << 20}, s.Resources)
	require.Equal(t, "none", s.Network)
	require.Equal(t, "/work", s.Workdir)
	require.Equal(t, "required", s.Isolation)

	s, ok = p.Job("plain")
	require.True(t, ok)
	require.Empty(t, s.Image)
	require.Nil(t, s.Resources)
	require.Equal(t, "default", s.Network)
	require.Empty(t, s.Workdir)
	require.Empty(t, s.Isolation)
}
