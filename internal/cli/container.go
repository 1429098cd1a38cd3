package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/client"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/container"
)

// ContainerFlags are the flags of the container executor, shared by
// `jobplane worker` and `jobplane dev`.
type ContainerFlags struct {
	ContainerHost       string   `name:"container-host" help:"--executor container: the engine's Docker API address, e.g. unix:///run/podman/podman.sock (default: DOCKER_HOST, else the first of /var/run/docker.sock, /run/podman/podman.sock, $XDG_RUNTIME_DIR/podman/podman.sock that exists)." placeholder:"URL"`
	ContainerImage      string   `name:"container-image" help:"--executor container: image of jobs whose definition names no run.image (without it they fail to start)." placeholder:"REF"`
	ContainerPull       string   `name:"container-pull" default:"missing" enum:"missing,never,always" help:"--executor container: pull an image when it is missing (default), never, or before every attempt."`
	ContainerUlimits    []string `name:"container-ulimit" help:"--executor container: a limit set on every container, NAME=SOFT:HARD (repeatable; Podman on hosts whose hard limits are below its defaults needs nofile=1024:1024 and nproc=1024:1024)." placeholder:"NAME=SOFT:HARD"`
	ContainerSupervisor string   `name:"container-supervisor" help:"--executor container: a statically linked jobplane binary (CGO_ENABLED=0) mounted into each container as its supervisor (default: this binary)." placeholder:"PATH"`
}

// engineSockets are where engines usually listen, in the order tried.
func engineSockets() []string {
	s := []string{"/var/run/docker.sock", "/run/podman/podman.sock"}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		s = append(s, filepath.Join(d, "podman", "podman.sock"), filepath.Join(d, "docker.sock"))
	}
	return s
}

// containerHost is the engine address: the flag, DOCKER_HOST, or the first
// usual socket that exists.
func containerHost(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h, nil
	}
	for _, p := range engineSockets() {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return "unix://" + p, nil
		}
	}
	return "", &config.FieldError{Field: "--container-host", Message: fmt.Sprintf(
		"no container engine found: DOCKER_HOST is not set and none of %v exists; start Docker, or Podman's API (podman system service), or name its address", engineSockets())}
}

// containerExecutor is the executor of `--executor container`; it fails
// when the engine does not answer.
func containerExecutor(ctx context.Context, f ContainerFlags) (executor.Executor, error) {
	host, err := containerHost(f.ContainerHost)
	if err != nil {
		return nil, err
	}
	opts := []client.Opt{client.FromEnv, client.WithHost(host)}
	cl, err := client.New(opts...)
	if err != nil {
		return nil, &config.FieldError{Field: "--container-host", Message: err.Error()}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cl.Close()
		return nil, fmt.Errorf("--executor container: the container engine at %s does not answer: %w", host, err)
	}
	var ul []container.Ulimit
	for _, s := range f.ContainerUlimits {
		u, err := container.ParseUlimit(s)
		if err != nil {
			cl.Close()
			return nil, &config.FieldError{Field: "--container-ulimit", Message: err.Error()}
		}
		ul = append(ul, u)
	}
	x, err := container.New(container.Config{Client: cl, Image: f.ContainerImage, Supervisor: f.ContainerSupervisor,
		Pull: f.ContainerPull, Ulimits: ul, Clock: clock.Real{}})
	if err != nil {
		cl.Close()
		return nil, errors.New("--executor container: " + err.Error())
	}
	return x, nil
}
