package container

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/containertest"
	"github.com/jobplane/jobplane/internal/executor"
)

// envFakeWorker makes the test binary a stand-in worker (fakeWorker).
const envFakeWorker = "JOBPLANE_CONTAINER_FAKE_WORKER"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(envFakeWorker); cfg != "" {
		os.Exit(fakeWorker(cfg))
	}
	os.Exit(m.Run())
}

// fakeWorkerConfig is what the stand-in worker runs.
type fakeWorkerConfig struct {
	Host, Image, Supervisor, Runner, Attempt, Root string
	Command                                        []string
	WindowMS                                       int64
}

// fakeWorker starts one job and renews its bound as a worker would: every
// 200 ms the bound becomes now plus the window, printed ("until UNIXMS")
// before it is sent, so that the test knows the last bound the supervisor
// can have.
func fakeWorker(raw string) int {
	var c fakeWorkerConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cl, err := client.New(client.WithHost(c.Host))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var ul []Ulimit
	for _, s := range containertest.Ulimits {
		u, _ := ParseUlimit(s)
		ul = append(ul, u)
	}
	x, err := New(Config{Client: cl, Image: c.Image, Supervisor: c.Supervisor, Ulimits: ul, Clock: clock.Real{}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	window := time.Duration(c.WindowMS) * time.Millisecond
	until := time.Now().Add(window)
	fmt.Printf("until %d\n", until.UnixMilli())
	spec := &executor.Spec{Runner: c.Runner, Run: "run", Attempt: c.Attempt, Command: c.Command,
		Env: []string{"PATH=/bin"}, Until: until, Network: executor.NetworkNone, Output: func(string, string) {},
		Layout: executor.Layout{Root: c.Root, Workspace: filepath.Join(c.Root, "workspace"), Artifacts: filepath.Join(c.Root, "artifacts")}}
	j, err := x.Start(context.Background(), spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("started")
	for {
		time.Sleep(200 * time.Millisecond)
		until := time.Now().Add(window)
		fmt.Printf("until %d\n", until.UnixMilli())
		j.Extend(until)
	}
}

// growth records when each watched file last grew.
type growth struct {
	mu   sync.Mutex
	last map[string]time.Time
	size map[string]int64
}

func watch(t *testing.T, files ...string) *growth {
	g := &growth{last: map[string]time.Time{}, size: map[string]int64{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for _, f := range files {
				fi, err := os.Stat(f)
				if err != nil {
					continue
				}
				g.mu.Lock()
				if fi.Size() != g.size[f] {
					g.size[f] = fi.Size()
					g.last[f] = time.Now()
				}
				g.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return g
}

func (g *growth) lastGrew(f string) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last[f]
}

// jobWithGrandchild writes a line every 100 ms, as does a grandchild it
// daemonizes (setsid, detached from every stream).
const jobWithGrandchild = `setsid sh -c 'while :; do echo x >> /jobplane/workspace/grandchild; sleep 0.1; done' </dev/null >/dev/null 2>&1 &
while :; do echo x >> /jobplane/workspace/job; sleep 0.1; done`

func TestWorkerKilledOrStoppedJobEndsBeforeLeaseExpiry(t *testing.T) {
	h := newHarness(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			root := t.TempDir()
			l := layout(t, root)
			attempt := "att-" + strconv.Itoa(int(sig))
			cfg, _ := json.Marshal(fakeWorkerConfig{Host: h.eng.Host, Image: h.image, Supervisor: h.supervisor, Runner: h.runner,
				Attempt: attempt, Root: root, Command: []string{"sh", "-c", jobWithGrandchild}, WindowMS: 2500})
			cmd := exec.Command("/proc/self/exe", "-test.run=^$")
			cmd.Env = append(os.Environ(), envFakeWorker+"="+string(cfg))
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
			})
			var mu sync.Mutex
			var lastUntil time.Time
			started := make(chan struct{})
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if ms, ok := strings.CutPrefix(sc.Text(), "until "); ok {
						n, _ := strconv.ParseInt(ms, 10, 64)
						mu.Lock()
						lastUntil = time.UnixMilli(n)
						mu.Unlock()
					} else if sc.Text() == "started" {
						close(started)
					}
				}
			}()
			select {
			case <-started:
			case <-time.After(2 * time.Minute):
				t.Fatal("the stand-in worker did not start its job")
			}
			jobFile, childFile := filepath.Join(l.Workspace, "job"), filepath.Join(l.Workspace, "grandchild")
			g := watch(t, jobFile, childFile)
			waitFor(t, "both write", func() bool { return !g.lastGrew(jobFile).IsZero() && !g.lastGrew(childFile).IsZero() })
			time.Sleep(time.Second)

			require.NoError(t, cmd.Process.Signal(sig))
			signalled := time.Now()
			mu.Lock()
			bound := lastUntil
			mu.Unlock()
			// The lease expires no earlier than the bound plus the worker's
			// margin (at least 1 s).
			expiry := bound.Add(time.Second)
			time.Sleep(time.Until(expiry) + 2*time.Second)
			for _, f := range []string{jobFile, childFile} {
				last := g.lastGrew(f)
				require.True(t, last.Before(expiry), "%s wrote at %v, after the lease expiry %v", filepath.Base(f), last, expiry)
				t.Logf("%v: %s last wrote %v after the signal, %v before the bound, %v before the expiry",
					sig, filepath.Base(f), last.Sub(signalled).Round(time.Millisecond), bound.Sub(last).Round(time.Millisecond), expiry.Sub(last).Round(time.Millisecond))
			}
			// The restarted worker removes the container.
			require.NoError(t, h.x.Sweep(context.Background(), h.runner, func(string) bool { return false }))
		})
	}
}
