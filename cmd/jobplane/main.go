// Command jobplane is the job control plane: server, worker, dev and the CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jobplane/jobplane/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
