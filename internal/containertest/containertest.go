package containertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// EnvRequire turns a missing engine into a failure.
const EnvRequire = "JOBPLANE_TEST_REQUIRE_PODMAN"

// Unavailable skips t, or fails it under JOBPLANE_TEST_REQUIRE_PODMAN=1.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("containertest: %s (%s=1)", why, EnvRequire)
	}
	t.Skipf("containertest: %s", why)
}

// Require skips t when podman, runc or busybox is missing.
func Require(t testing.TB) {
	t.Helper()
	for _, b := range []string{"podman", "runc", "busybox"} {
		if _, err := exec.LookPath(b); err != nil {
			Unavailable(t, b+" is not installed (Debian: apt-get install podman runc busybox-static)")
		}
	}
}

// Ulimits are the limits every test container needs under Podman here.
var Ulimits = []string{"nofile=1024:1024", "nproc=1024:1024"}

// Engine is a running Podman service.
type Engine struct {
	// Host is the service's address, unix:///….
	Host string
	// Client talks to it.
	Client *client.Client
}

// Start starts a Podman service on a socket of t's own; it stops when t
// ends.
func Start(t testing.TB) *Engine {
	t.Helper()
	Require(t)
	// A short path: a unix socket's name is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "jp-podman-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "podman.sock")
	var out bytes.Buffer
	cmd := exec.Command("podman", "--runtime", "runc", "system", "service", "--time", "0", "unix://"+sock)
	// The containers' conmon processes inherit the service's working
	// directory, and conmon before 2.1.13 creates an empty file "oom" there
	// when a container is OOM-killed (containers/conmon#504): not in the
	// test's package directory.
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		Unavailable(t, "start podman system service: "+err.Error())
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	host := "unix://" + sock
	cl, err := client.New(client.WithHost(host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	deadline := time.After(60 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = cl.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
			cancel()
			if err == nil {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("podman system service ended: %s", out.String())
		case <-deadline:
			t.Fatalf("podman system service did not answer on %s: %s", sock, out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return &Engine{Host: host, Client: cl}
}

func podman(args ...string) (string, error) {
	cmd := exec.Command("podman", append([]string{"--runtime", "runc"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// BusyboxImage imports an image holding Debian's busybox-static, with its
// applets linked in /bin, as ref; it is removed when t ends.
func BusyboxImage(t testing.TB, ref string) string {
	t.Helper()
	Require(t)
	bb, err := exec.LookPath("busybox")
	if err != nil {
		Unavailable(t, "busybox is not installed")
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range strings.Fields(string(list)) {
		if c != "busybox" {
			_ = os.Symlink("busybox", filepath.Join(root, "bin", c))
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "rootfs.tar")
	if out, err := exec.Command("tar", "-C", root, "-cf", tarPath, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	if _, err := podman("import", "--change", "ENV PATH=/bin", "--change", `CMD ["/bin/sh"]`, tarPath, ref); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = podman("rmi", "-f", ref) })
	return ref
}

// Supervisor builds the statically linked supervisor (package
// internal/containertest/supervisor) and returns its path.
func Supervisor(t testing.TB) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" {
		t.Fatalf("find the module: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "jobplane")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/jobplane/jobplane/internal/containertest/supervisor")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the supervisor: %v: %s", err, out)
	}
	return bin
}

// Containers lists the names of the containers (running or not) labelled
// label=value.
func (e *Engine) Containers(t testing.TB, label, value string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.Client.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label+"="+value)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range res.Items {
		names = append(names, strings.Join(c.Names, ","))
	}
	return names
}
