package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/jobplane/jobplane/internal/apiclient"
)

// Exit codes (docs/cli.md). Scripts tell "the run failed" from "the server
// said no" from "I typed it wrong" from "there is no server".
const (
	ExitOK = 0
	// ExitFailed: a followed run ended other than succeeded (failed,
	// cancelled, timed out, rejected, expired), a check found problems
	// (validate, diff, audit verify), or any other error.
	ExitFailed = 1
	// ExitUsage: the command line is wrong (unknown command or flag, a
	// flag value out of its set, a malformed -p).
	ExitUsage = 2
	// ExitRefused: the server refused the request (a policy denial, no
	// permission, bad parameters, an unknown job or run, a conflict).
	ExitRefused = 3
	// ExitUnreachable: no server answered at the URL, or it answered that
	// it is unavailable (502, 503, 504).
	ExitUnreachable = 4
	// ExitInterrupted: Ctrl-C (128 + SIGINT, as shells report it); a
	// followed run goes on.
	ExitInterrupted = 130
)

// usageError is a command line the program cannot act on.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// hintError adds lines telling the user what to do next to an error.
type hintError struct {
	err   error
	hints []string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

func withHints(err error, hints ...string) error {
	if err == nil || len(hints) == 0 {
		return err
	}
	return &hintError{err: err, hints: hints}
}

// unreachableError is a request that reached no server.
type unreachableError struct {
	server string
	err    error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the server at %s: %v", e.server, rootCause(e.err))
}
func (e *unreachableError) Unwrap() error { return e.err }

// asUnreachable recognises a request that never got an HTTP answer:
// connection refused or reset, an unknown host, a timeout while
// connecting.
func asUnreachable(err error) (*unreachableError, bool) {
	var ue *unreachableError
	if errors.As(err, &ue) {
		return ue, true
	}
	if errors.Is(err, context.Canceled) {
		return nil, false
	}
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		return nil, false
	}
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) || errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) || uerr.Timeout() {
		server := uerr.URL
		if u, perr := url.Parse(uerr.URL); perr == nil && u.Host != "" {
			server = u.Scheme + "://" + u.Host
		}
		return &unreachableError{server: server, err: err}, true
	}
	return nil, false
}

func rootCause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns
	}
	return err
}

// exitCode maps an error to the documented exit code.
func exitCode(err error) int {
	var ee *ExitError
	var ue *usageError
	var ae *apiclient.APIError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.Code
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &ae):
		switch {
		case ae.Status == http.StatusBadGateway || ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout:
			return ExitUnreachable
		case ae.Status >= 400 && ae.Status < 500:
			return ExitRefused
		}
		return ExitFailed
	}
	if _, ok := asUnreachable(err); ok {
		return ExitUnreachable
	}
	return ExitFailed
}

// printHints writes what to do next, for errors that know.
func printHints(w io.Writer, err error) {
	if ue, ok := asUnreachable(err); ok {
		fmt.Fprintf(w, "  is a server running there? Start one for a first try with `jobplane dev` (in another terminal),\n")
		fmt.Fprintf(w, "  or point --server or JOBPLANE_SERVER at one (now: %s; without them ./.jobplane/cli.json is read).\n", ue.server)
	}
	var he *hintError
	if errors.As(err, &he) {
		for _, h := range he.hints {
			fmt.Fprintf(w, "  %s\n", h)
		}
	}
}

// closest returns the candidates within a small edit distance of s, best
// first, for "did you mean" hints.
func closest(s string, candidates []string) []string {
	type scored struct {
		name string
		d    int
	}
	var best []scored
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		limit := max(2, len(s)/3)
		if d <= limit || strings.Contains(strings.ToLower(c), strings.ToLower(s)) && len(s) >= 3 {
			best = append(best, scored{c, d})
		}
	}
	for i := 1; i < len(best); i++ {
		for j := i; j > 0 && best[j].d < best[j-1].d; j-- {
			best[j], best[j-1] = best[j-1], best[j]
		}
	}
	out := make([]string, 0, len(best))
	for _, b := range best {
		out = append(out, b.name)
	}
	return out
}

func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
