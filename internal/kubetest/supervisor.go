package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// jobplaneBinary builds cmd/jobplane into dir as deploy/build-image.sh
// does: statically (CGO_ENABLED=0), so that it runs in an image without a
// C library, and without symbols and debug information (-s -w), which the
// init container copies into every pod.
func jobplaneBinary(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "jobplane")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/jobplane")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err: err, out: string(b)}
	}
	return bin, nil
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "go build ./cmd/jobplane: " + e.err.Error() + ": " + e.out
}

// SupervisorImage imports an image whose entrypoint is a static jobplane
// binary at /jobplane, as the worker's image is, and returns its
// reference; it is removed when t ends. The Kubernetes executor's init
// container copies the supervisor from it. A failure is returned, not
// fatal, so that only the tests that need the image fail.
func SupervisorImage(t testing.TB, ref string) (string, error) {
	t.Helper()
	RequirePodman(t)
	root := t.TempDir()
	if _, err := jobplaneBinary(root); err != nil {
		return "", err
	}
	tarPath := filepath.Join(t.TempDir(), "rootfs.tar")
	if out, err := exec.Command("tar", "-C", root, "-cf", tarPath, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar: %v: %s", err, out)
	}
	if _, err := podman(context.Background(), "import", "--change", `ENTRYPOINT ["/jobplane"]`, tarPath, ref); err != nil {
		return "", err
	}
	t.Cleanup(func() { _, _ = podman(context.Background(), "rmi", "-f", ref) })
	return ref, nil
}
