package cli

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/config"
)

func TestContainerHost(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("DOCKER_HOST", "")
	h, err := containerHost("unix:///flag.sock")
	require.NoError(t, err)
	require.Equal(t, "unix:///flag.sock", h, "the flag wins")

	t.Setenv("DOCKER_HOST", "tcp://engine:2376")
	h, err = containerHost("")
	require.NoError(t, err)
	require.Equal(t, "tcp://engine:2376", h, "then DOCKER_HOST")

	t.Setenv("DOCKER_HOST", "")
	if _, err := containerHost(""); err != nil {
		var fe *config.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		require.Equal(t, "--container-host", fe.Field)
	}
	// A socket in the user's runtime directory is found.
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	sock := filepath.Join(dir, "podman", "podman.sock")
	require.NoError(t, os.MkdirAll(filepath.Dir(sock), 0o700))
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	h, err = containerHost("")
	require.NoError(t, err)
	if h != "unix:///var/run/docker.sock" && h != "unix:///run/podman/podman.sock" {
		require.Equal(t, "unix://"+sock, h)
	}
}

func TestContainerExecutorEngineDown(t *testing.T) {
	_, err := containerExecutor(context.Background(), ContainerFlags{ContainerHost: "unix://" + filepath.Join(t.TempDir(), "none.sock")})
	require.ErrorContains(t, err, "does not answer")
}
