// Package failpoint lets tests inject faults at named points of the control
// plane ("claim.afterCommitBeforeReply", "rescue.afterSelect", …), so that
// crashes and races around commits can be provoked on purpose instead of
// hoped for. In production no point is set and Inject is one atomic load.
//
// In-process tests call Enable. Process-level tests set JOBPLANE_FAILPOINTS,
// a comma-separated list of name=action where action is exit (the process
// dies at once, as under SIGKILL), error (the operation fails), or sleep(D)
// with a Go duration.
package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInjected is returned by an "error" failpoint.
var ErrInjected = errors.New("failpoint: injected error")

var (
	active atomic.Bool
	mu     sync.RWMutex
	points = map[string]func() error{}
)

func init() {
	if spec := os.Getenv("JOBPLANE_FAILPOINTS"); spec != "" {
		if err := parse(spec); err != nil {
			fmt.Fprintln(os.Stderr, "jobplane: JOBPLANE_FAILPOINTS:", err)
			os.Exit(2)
		}
	}
}

func parse(spec string) error {
	for _, item := range strings.Split(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" {
			return fmt.Errorf("%q is not name=action", item)
		}
		var f func() error
		switch {
		case action == "exit":
			f = func() error { os.Exit(99); return nil }
		case action == "error":
			f = func() error { return ErrInjected }
		case strings.HasPrefix(action, "sleep(") && strings.HasSuffix(action, ")"):
			d, err := time.ParseDuration(action[len("sleep(") : len(action)-1])
			if err != nil {
				return fmt.Errorf("%s: %w", item, err)
			}
			f = func() error { time.Sleep(d); return nil }
		default:
			return fmt.Errorf("%s: unknown action %q (exit, error, sleep(D))", item, action)
		}
		Enable(name, f)
	}
	return nil
}

// Enable sets a failpoint; the returned function removes it.
func Enable(name string, f func() error) (disable func()) {
	mu.Lock()
	points[name] = f
	active.Store(true)
	mu.Unlock()
	return func() {
		mu.Lock()
		delete(points, name)
		active.Store(len(points) > 0)
		mu.Unlock()
	}
}

// Inject runs the failpoint name, if set, and returns its error.
func Inject(name string) error {
	if !active.Load() {
		return nil
	}
	mu.RLock()
	f := points[name]
	mu.RUnlock()
	if f == nil {
		return nil
	}
	return f()
}
