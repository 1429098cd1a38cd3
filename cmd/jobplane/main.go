// Command jobplane is the job control plane: server, worker, dev and the CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jobplane/jobplane/internal/cli"
	"github.com/jobplane/jobplane/internal/executor/supervise"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "supervise" {
		// The job supervisor (a container's or pod's entrypoint) handles
		// its own signals and takes its command after `--`.
		os.Exit(supervise.Main(os.Args[2:], os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
