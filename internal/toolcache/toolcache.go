package toolcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// ToolsDir finds tools/name from the working directory (a test runs in its
// package's directory, somewhere below the module root).
func ToolsDir(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "tools", name, "go.sum")); err == nil {
			return filepath.Join(dir, "tools", name), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no tools/%s/go.sum above the working directory", name)
		}
		dir = parent
	}
}

// Dir is the cache directory of the binaries of the tools module at tools:
// PREFIX-HASH under the user's cache directory's jobplane folder.
func Dir(tools, prefix string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(tools, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "jobplane", prefix+"-"+hex.EncodeToString(h.Sum(nil))[:16]), nil
}
