package process

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jobplane/jobplane/internal/executor"
)

// JobUser is the OS user a process executor runs jobs as.
type JobUser struct {
	Name     string
	UID, GID uint32
}

// LookupUser resolves name (a user name or a numeric UID) for --job-user.
// The user must not be the worker's own, nor root.
func LookupUser(name string) (*JobUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("job user %q: no such user", name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("job user %q: UID %q or GID %q is not numeric", name, u.Uid, u.Gid)
	}
	if uid == 0 {
		return nil, fmt.Errorf("job user %q is root: a job running as root can read the runner's key", name)
	}
	if int(uid) == os.Getuid() {
		return nil, fmt.Errorf("job user %q is the worker's own user: that isolates nothing", name)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("job user %q: the worker must run as root to start jobs as another user", name)
	}
	// Without the kernel's hard-link protection a job could link the
	// runner's key (same file system, unreadable to it) into its artifacts
	// directory, which the worker then uploads.
	if b, err := os.ReadFile("/proc/sys/fs/protected_hardlinks"); err != nil || strings.TrimSpace(string(b)) != "1" {
		return nil, fmt.Errorf("job user %q: fs.protected_hardlinks must be 1, or a job could hard-link the runner's key into its artifacts", name)
	}
	return &JobUser{Name: u.Username, UID: uint32(uid), GID: uint32(gid)}, nil
}

// prepare hands the attempt directory's contents to the job user: it
// creates HOME and TMPDIR, gives the user everything in the attempt
// directory, lets it pass (never list or read) through the directory and
// those above, and returns env with HOME,
// TMPDIR, USER and LOGNAME set for it. The worker's state directory stays
// unreadable: its files are 0600, and passage is all the user gets.
func (u *JobUser) prepare(l executor.Layout, env []string) ([]string, error) {
	for _, d := range []string{l.Home, l.Tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// The attempt directory itself stays the worker's (passage only), so
	// that the job cannot swap its artifacts directory for a link to the
	// state directory before the worker uploads from it.
	err := filepath.WalkDir(l.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == l.Root {
			return err
		}
		return os.Lchown(p, int(u.UID), int(u.GID))
	})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(l.Root, 0o711); err != nil {
		return nil, err
	}
	for d := filepath.Dir(l.Root); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return nil, err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return nil, err
			}
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	set := map[string]string{"HOME": l.Home, "TMPDIR": l.Tmp, "USER": u.Name, "LOGNAME": u.Name}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range []string{"HOME", "TMPDIR", "USER", "LOGNAME"} {
		out = append(out, k+"="+set[k])
	}
	return out, nil
}
