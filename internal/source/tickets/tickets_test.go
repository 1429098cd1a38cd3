package tickets

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// noHosted is a Git host integration that serves no sources.
type noHosted struct{}

func (noHosted) ServesSources() bool { return false }
func (noHosted) Archive(context.Context, string, string, string, func() io.Writer) error {
	panic("not served")
}

// TestRedeemWithoutSources: a server with neither configured repositories
// nor a Git host that serves sources refuses every ticket as
// source_unavailable, before reading it and without opening the writer.
func TestRedeemWithoutSources(t *testing.T) {
	t.Parallel()

	for _, s := range []*Service{New(Config{}), New(Config{Hosted: noHosted{}})} {
		opened := false
		err := s.RedeemSource(context.Background(), "ticket", func() io.Writer { opened = true; return io.Discard })
		require.ErrorIs(t, err, protocol.ErrSourceUnavailable)
		require.False(t, opened)
	}
}

// TestPinnedSource: the repository and commit a run's pinned spec names;
// nil for a job without a source.
func TestPinnedSource(t *testing.T) {
	t.Parallel()

	src, err := pinnedSource(&store.Run{Spec: []byte(`{"name":"b","source":{"repo":"code","branch":"main","commit":"abc"}}`)})
	require.NoError(t, err)
	require.Equal(t, &pinned{Repo: "code", Commit: "abc"}, src)
	src, err = pinnedSource(&store.Run{Spec: []byte(`{"name":"b"}`)})
	require.NoError(t, err)
	require.Nil(t, src)
	require.True(t, hostedRepo("acme/app"))
	require.False(t, hostedRepo("code"))
}
