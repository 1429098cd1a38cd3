// Command supervisor is `jobplane supervise` on its own: a small binary
// that tests build statically (CGO_ENABLED=0) in seconds and mount into
// containers as the container executor's supervisor, where building the
// whole jobplane binary that way would take minutes.
package main

import (
	"fmt"
	"os"

	"github.com/jobplane/jobplane/internal/executor/supervise"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "supervise" {
		os.Exit(supervise.Main(os.Args[2:], os.Stderr))
	}
	fmt.Fprintln(os.Stderr, "usage: supervisor supervise [flags] -- COMMAND [ARG...]")
	os.Exit(2)
}
