package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the version workers report to the server. deploy/build-image.sh
// sets it with -ldflags -X; otherwise it is the module version Go recorded
// in the binary (a tag, a pseudo-version, or "(devel)").
var Version = "dev"

// buildInfo is what `jobplane version` reads; a variable so that tests can
// give a build with and without VCS settings.
var buildInfo = debug.ReadBuildInfo

// versionString is one line for people and bug reports: version, Git
// revision and commit time, whether the tree had uncommitted changes, and
// the Go toolchain.
func versionString() string {
	version, rev, at, modified := Version, "", "", false
	if bi, ok := buildInfo(); ok {
		if version == "dev" && bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "jobplane %s", version)
	if rev != "" {
		fmt.Fprintf(&b, " (revision %s", rev)
		if at != "" {
			fmt.Fprintf(&b, ", %s", at)
		}
		if modified {
			b.WriteString(", with uncommitted changes")
		}
		b.WriteString(")")
	} else {
		b.WriteString(" (revision unknown: built without Git information, e.g. by go run or go test)")
	}
	fmt.Fprintf(&b, " %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return b.String()
}
