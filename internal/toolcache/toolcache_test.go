package toolcache

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// TestDirMatchesCI checks the path against the shell's computation in
// .ci/run: sha256 of go.mod then go.sum, first 16 hex digits.
func TestDirMatchesCI(t *testing.T) {
	tools, err := ToolsDir("s3")
	if err != nil {
		t.Fatal(err)
	}
	mod, _ := os.ReadFile(filepath.Join(tools, "go.mod"))
	sum, _ := os.ReadFile(filepath.Join(tools, "go.sum"))
	h := sha256.Sum256(append(mod, sum...))
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cache, "jobplane", "weed-"+hex.EncodeToString(h[:])[:16])
	got, err := Dir(tools, "weed")
	if err != nil || got != want {
		t.Fatalf("Dir = %q, %v; want %q", got, err, want)
	}
	if _, err := ToolsDir("no-such-tool"); err == nil {
		t.Fatal("ToolsDir found a module that does not exist")
	}
}
