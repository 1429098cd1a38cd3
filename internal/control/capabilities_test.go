package control

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/store"
)

// TestAttemptNeeds: what an attempt needs of its runner's executor, and
// why it must be isolated, from its pinned spec and its run's grants.
func TestAttemptNeeds(t *testing.T) {
	conns := map[string]connector.Pinned{"db": {Declared: "write"}, "s3": {Declared: "read"}}
	for _, c := range []struct {
		name   string
		spec   Spec
		grants string
		needs  store.Capabilities
		reason string
	}{
		{"plain", Spec{}, `{}`, 0, ""},
		{"image", Spec{Image: "busybox:1.36"}, `{}`, store.CapImages, ""},
		{"limits without an image", Spec{Resources: &SpecResources{MemoryBytes: 1 << 20}}, `{}`, store.CapImages, ""},
		{"no network without an image", Spec{Network: "none"}, `{}`, store.CapImages, ""},
		{"the default network", Spec{Network: "default", Resources: &SpecResources{}}, `{}`, 0, ""},
		{"safe mode", Spec{SafeMode: true}, `{}`, store.CapIsolated, "safe mode: pull request from a fork"},
		{"required", Spec{Isolation: "required", Image: "busybox"}, `{}`, store.CapImages | store.CapIsolated, "isolation: required"},
		{"write granted", Spec{Connectors: conns}, `{"db":"write","s3":"write"}`, store.CapIsolated, "connector db granted write"},
		{"write declared, read granted", Spec{Connectors: conns}, `{"db":"read","s3":"write"}`, 0, ""},
		{"grant of a connector not declared", Spec{Connectors: conns}, `{"other":"write"}`, 0, ""},
		{"unreadable grants", Spec{Connectors: conns}, `[1]`, store.CapIsolated, "grants unreadable"},
		{"no grants", Spec{Connectors: conns}, ``, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &store.Run{Grants: json.RawMessage(c.grants)}
			require.Equal(t, c.needs, attemptNeeds(r, c.spec))
			require.Equal(t, c.reason, isolationReason(r, c.spec))
		})
	}
}

// TestIsolateWriteGrants: a write grant keeps a run on isolated runners
// only on a server that isolates write grants; the other reasons hold on
// every server.
func TestIsolateWriteGrants(t *testing.T) {
	spec := Spec{Connectors: map[string]connector.Pinned{"db": {Declared: "write"}}}
	r := &store.Run{Grants: json.RawMessage(`{"db":"write"}`)}
	off, on := &Service{}, &Service{isolateWriteGrants: true}
	require.Empty(t, off.isolationReason(r, spec))
	require.Zero(t, off.newAttempt(r, spec, 1, testEpoch, testEpoch).Needs)
	require.Equal(t, "connector db granted write", on.isolationReason(r, spec))
	require.Equal(t, store.CapIsolated, on.newAttempt(r, spec, 1, testEpoch, testEpoch).Needs)
	spec.SafeMode = true
	require.Equal(t, store.CapIsolated, off.newAttempt(r, spec, 1, testEpoch, testEpoch).Needs)
}

// TestNeedsText: waiting_for names why a run needs a runner that runs
// images, so a job with limits and no image does not read as one with an
// image.
func TestNeedsText(t *testing.T) {
	require.Equal(t, []string{"a runner that can run images (run.image)"},
		needsText(store.CapImages, imagesReason(Spec{Image: "busybox"}), ""))
	require.Equal(t, []string{"a runner that can run images (run.image, run.resources)", "an isolated runner (isolation: required)"},
		needsText(store.CapImages|store.CapIsolated, imagesReason(Spec{Image: "busybox", Resources: &SpecResources{CPUMillis: 500}}), "isolation: required"))
	require.Equal(t, []string{"a runner that can run images (run.network: none)"},
		needsText(store.CapImages, imagesReason(Spec{Network: "none"}), ""))
}
