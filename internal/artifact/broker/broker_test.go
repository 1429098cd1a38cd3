package broker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// TestDeclared: the artifacts of a pinned spec, with the default size
// limit where the job sets none.
func TestDeclared(t *testing.T) {
	t.Parallel()

	spec, err := json.Marshal(map[string]any{"name": "build", "artifacts": []protocol.ArtifactSpec{
		{Name: "report.json", Role: "report", MaxBytes: 1000}, {Name: "big.bin", Role: "data"}}})
	require.NoError(t, err)
	got, err := declared(&store.Run{Spec: spec})
	require.NoError(t, err)
	require.Equal(t, []protocol.ArtifactSpec{{Name: "report.json", Role: "report", MaxBytes: 1000},
		{Name: "big.bin", Role: "data", MaxBytes: artifact.DefaultMaxBytes}}, got)

	got, err = declared(&store.Run{Spec: []byte(`{"name":"plain"}`)})
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = declared(&store.Run{Spec: []byte(`{"artifacts":"none"}`)})
	require.Error(t, err)
}

// TestRefusedBeforeTheStore: requests the service refuses before reading
// anything, each with its code; without storage, uploads are unavailable.
func TestRefusedBeforeTheStore(t *testing.T) {
	t.Parallel()

	s := New(Config{}) // no store, no storage: nothing below may reach them
	ctx := context.Background()
	for _, c := range []struct {
		req  protocol.ArtifactRequest
		want error
	}{
		{protocol.ArtifactRequest{Name: "../x"}, protocol.ErrInvalidName},
		{protocol.ArtifactRequest{Name: "ok.txt", SHA256: "sha256:" + strings.Repeat("a", 64)}, protocol.ErrBadRequest},
		{protocol.ArtifactRequest{Name: "ok.txt", Size: -1}, protocol.ErrBadRequest},
		{protocol.ArtifactRequest{Name: "ok.txt", SHA256: strings.Repeat("A", 64)}, protocol.ErrUnavailable},
	} {
		_, err := s.RequestUpload(ctx, nil, &c.req)
		require.ErrorIs(t, err, c.want, "%+v", c.req)
	}
	_, err := s.Upload(ctx, "capability", 1, strings.NewReader("x"))
	require.ErrorIs(t, err, protocol.ErrUnavailable)
	require.Equal(t, DefaultUploadTimeout, s.UploadTimeout())
}
