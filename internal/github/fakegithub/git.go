package fakegithub

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitEnv makes commits reproducible and independent of the user's config.
var gitEnv = []string{
	"GIT_AUTHOR_NAME=jobplane test", "GIT_AUTHOR_EMAIL=test@jobplane.invalid",
	"GIT_COMMITTER_NAME=jobplane test", "GIT_COMMITTER_EMAIL=test@jobplane.invalid",
	"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), gitEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// resolveCommit returns the full commit ID ref names in the repository.
func resolveCommit(dir, ref string) (string, error) {
	if strings.HasPrefix(ref, "-") {
		return "", fmt.Errorf("bad ref %q", ref)
	}
	out, err := git(dir, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// InitRepo creates a git repository in a temporary directory with one
// commit of files on branch main and returns its directory and the commit.
func InitRepo(t testing.TB, files map[string]string) (dir, sha string) {
	t.Helper()
	dir = t.TempDir()
	if _, err := git(dir, "init", "-q", "-b", "main"); err != nil {
		t.Fatal(err)
	}
	return dir, Commit(t, dir, files)
}

// Commit writes files into the repository and commits them.
func Commit(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "--allow-empty", "-m", "change"}} {
		if _, err := git(dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	sha, err := resolveCommit(dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

// tarball serves git archive's tar of the exact commit, gzipped, under a
// top directory named like GitHub's (owner-repo-shortsha). git archive of
// a commit writes a pax global header carrying the commit ID first.
func (f *Fake) tarball(w http.ResponseWriter, r *http.Request, rp *Repo) {
	sha, err := resolveCommit(rp.GitDir, r.PathValue("ref"))
	if err != nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	f.mu.Lock()
	served, swapped := f.swap[strings.ToLower(rp.FullName)+"@"+sha]
	f.mu.Unlock()
	if swapped {
		sha = served
	}
	prefix := strings.ReplaceAll(rp.FullName, "/", "-") + "-" + sha[:7] + "/"
	tarBytes, err := git(rp.GitDir, "archive", "--format=tar", "--prefix="+prefix, sha)
	if err != nil {
		ghError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/x-gzip")
	w.Header().Set("Content-Disposition", "attachment; filename="+strings.TrimSuffix(prefix, "/")+".tar.gz")
	w.WriteHeader(http.StatusOK)
	zw := gzip.NewWriter(w)
	_, _ = zw.Write(tarBytes)
	_ = zw.Close()
}

// commit answers GET /repos/{o}/{r}/commits/{ref} with the commit ID the
// ref names now (the fields jobplane reads).
func (f *Fake) commit(w http.ResponseWriter, r *http.Request, rp *Repo) {
	ref := r.PathValue("ref")
	sha, err := resolveCommit(rp.GitDir, ref)
	if err != nil {
		ghError(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+ref)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sha": sha})
}

// repository answers GET /repos/{o}/{r}.
func (f *Fake) repository(w http.ResponseWriter, _ *http.Request, rp *Repo) {
	branch := "main"
	if out, err := git(rp.GitDir, "symbolic-ref", "--short", "HEAD"); err == nil {
		branch = strings.TrimSpace(string(out))
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": rp.ID, "full_name": rp.FullName, "private": rp.Private,
		"default_branch": branch, "name": rp.FullName[strings.IndexByte(rp.FullName, '/')+1:],
		"owner": map[string]any{"login": rp.FullName[:strings.IndexByte(rp.FullName, '/')], "id": rp.OwnerID}})
}
