package s3test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jobplane/jobplane/internal/toolcache"
)

// Environment variables of the S3 tests.
const (
	// EnvRequire set to 1 turns a missing server into a failure (CI).
	EnvRequire = "JOBPLANE_TEST_REQUIRE_S3"
	// EnvBinary names a weed binary to use instead of the cached build.
	EnvBinary = "JOBPLANE_TEST_WEED"
)

// weedPackage is what tools/s3 builds.
const weedPackage = "github.com/seaweedfs/seaweedfs/weed"

// buildBudget is how much of a test's deadline a cold build may need: it
// took about 25 minutes on a busy two-core machine (docs/operations.md).
const buildBudget = 40 * time.Minute

// ToolsDir finds tools/s3 from the working directory.
func ToolsDir() (string, error) { return toolcache.ToolsDir("s3") }

// BinaryPath is where the weed binary of this tools module is cached:
// $XDG_CACHE_HOME (or ~/.cache)/jobplane/weed-HASH/weed, HASH naming the
// module's go.mod and go.sum, so a version change builds anew and
// .ci/run computes the same path.
func BinaryPath(tools string) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return p, nil
	}
	dir, err := toolcache.Dir(tools, "weed")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "weed"), nil
}

// Build builds weed into BinaryPath unless it is there already. Concurrent
// test binaries wait on one lock file, so only one builds.
func Build(tools string) (string, error) {
	bin, err := BinaryPath(tools)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by whoever held the lock
	}
	// Build to a temporary name and rename, so an interrupted build never
	// leaves a binary that looks finished.
	tmp := bin + ".partial"
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, weedPackage)
	cmd.Dir = tools
	// The tools module is its own module: a GOFLAGS=-mod=... or GOWORK of
	// the caller must not apply to it.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", weedPackage, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// binary returns the weed binary for a test: cached, or built now when the
// test's deadline leaves room; otherwise the test skips (or fails under
// EnvRequire).
func binary(t testing.TB) string {
	t.Helper()
	bin, err := findBinary(t)
	if err != nil {
		unavailable(t, err.Error())
	}
	return bin
}

func findBinary(t testing.TB) (string, error) {
	t.Helper()
	tools, err := ToolsDir()
	if err != nil {
		return "", err
	}
	bin, err := BinaryPath(tools)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if d, ok := deadline(t); ok && time.Until(d) < buildBudget {
		return "", fmt.Errorf("no S3 test server at %s and too little time left to build it; build it once with: (cd %s && go build -o %s %s)", bin, tools, bin, weedPackage)
	}
	t.Logf("s3test: building %s into %s (once; several minutes)", weedPackage, bin)
	return Build(tools)
}

func deadline(t testing.TB) (time.Time, bool) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		return d.Deadline()
	}
	return time.Time{}, false
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("s3test: %s (%s=1)", why, EnvRequire)
	}
	t.Skipf("s3test: %s", why)
}
