package jobfiles

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckArtifact: only a regular file within its limit passes; a
// symlink the job planted (even to a small file) and a directory do not,
// and a missing name says so.
func TestCheckArtifact(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"ok.txt": "12345", "big.bin": strings.Repeat("y", 11)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := CheckArtifact(root, "ok.txt", 5); err != nil {
		t.Errorf("ok.txt: %v", err)
	}
	if err := CheckArtifact(root, "big.bin", 10); err == nil || !strings.Contains(err.Error(), "at most 10") {
		t.Errorf("big.bin: %v", err)
	}
	for _, n := range []string{"link", "sub"} {
		if err := CheckArtifact(root, n, 0); !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: %v, want ErrNotRegular", n, err)
		}
	}
	if err := CheckArtifact(root, "missing", 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if _, err := root.Lstat("../secret"); err == nil {
		t.Error("the root lets a name reach outside")
	}
	n, sum, err := Hash(root, "ok.txt")
	if err != nil || n != 5 || sum != "5994471abb01112afcc18159f6cc74b4f511b99806da59b3caf5a9c173cacfc5" {
		t.Errorf("Hash: %d %s %v", n, sum, err)
	}
}
