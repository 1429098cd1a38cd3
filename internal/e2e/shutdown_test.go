package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shutdownBound is the exit time docs/operations.md promises for a SIGTERM
// with nothing but idle long-polls and short requests in flight.
const shutdownBound = 2 * time.Second

// clients send requests one after another on kept-alive connections (a
// GET and a POST each; the POST names no job, so that it makes no work
// that would keep an idle worker from its long-poll) and sort their failures: a refused connection is
// what a stopped server gives and is safe to retry; anything else (EOF,
// reset) is a connection dropped mid-request.
type clients struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	dropped []string
	refused int
	ok      int
}

func startClients(s *server, n int) *clients {
	c := &clients{stop: make(chan struct{})}
	for i := range n {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			hc := checkedHTTP(s.t, 10*time.Second)
			for k := 0; ; k++ {
				select {
				case <-c.stop:
					return
				default:
				}
				var req *http.Request
				if k%2 == 0 {
					req, _ = http.NewRequest(http.MethodGet, s.url+"/v1/runs?limit=3", nil)
				} else {
					req, _ = http.NewRequest(http.MethodPost, s.url+"/v1/runs", strings.NewReader(`{"job":"no-such-job","channel":"prod"}`))
					req.Header.Set("Content-Type", "application/json")
				}
				req.Header.Set("Authorization", "Bearer "+s.adminToken)
				resp, err := hc.Do(req)
				c.mu.Lock()
				switch {
				case err == nil:
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					c.ok++
				case errors.Is(err, syscall.ECONNREFUSED):
					c.refused++
				default:
					c.dropped = append(c.dropped, fmt.Sprintf("client %d: %s %s: %v", i, req.Method, req.URL.Path, err))
				}
				c.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return c
}

func (c *clients) finish() {
	close(c.stop)
	c.wg.Wait()
}

// sigterm stops s with SIGTERM (failing after 15 s) and returns how long it
// took and its exit error.
func sigterm(t *testing.T, s *server) (time.Duration, error) {
	t.Helper()
	down := time.Now()
	_ = s.proc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.proc.done:
	case <-time.After(15 * time.Second):
		require.FailNow(t, "server did not exit within 15 s of SIGTERM")
	}
	return time.Since(down), s.proc.err
}

func shutdownJobs(dir string) []job {
	// 6 s of work on a 4 s lease: the worker's trust window is 3 s, so a
	// stop that held renewals back for longer costs the lease.
	return shutdownJobsLeased(dir, "4s")
}

func shutdownJobsLeased(dir, ttl string) []job {
	script := fmt.Sprintf(`echo $$ >> %s/pids; i=1; while [ $i -le 12 ]; do echo "line $i"; i=$((i+1)); sleep 0.5; done`, dir)
	return []job{{name: "short-lease", script: script, leaseTTL: ttl, maxAttempts: 3}, {name: "noop", script: "true"}}
}

// TestServerSIGTERMIsGraceful: SIGTERM to a server with one worker idle in
// a claim long-poll, one running a job on a short lease, and clients
// sending requests on kept-alive connections. The server exits 0 within
// shutdownBound; no client sees a connection dropped mid-request (only
// refused connections while it is down); after a restart the job finishes
// on its first attempt.
func TestServerSIGTERMIsGraceful(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		// The lease must outlast the stop (bounded below) and the restart,
		// which on a loaded machine with PostgreSQL has taken 2.5 s: an 8 s
		// lease leaves the worker a trust window of about 6 s.
		e := newEnv(t, func(dir string) []job { return shutdownJobsLeased(dir, "8s") })
		s := startServer(t, b.dsn(t), e)
		startWorker(t, s, "worker-busy", t.TempDir(), s.registrationToken())
		run := s.createRun("short-lease")
		s.waitState(run.ID, 20*time.Second, "running")
		startWorker(t, s, "worker-idle", t.TempDir(), s.registrationToken())
		time.Sleep(500 * time.Millisecond) // the idle worker is in its long-poll

		c := startClients(s, 4)
		time.Sleep(300 * time.Millisecond)
		exited, exitErr := sigterm(t, s)
		s.start()
		c.finish()
		t.Logf("server exited in %s (%v); clients: %d answered, %d refused connections, %d dropped",
			exited.Round(time.Millisecond), exitErr, c.ok, c.refused, len(c.dropped))
		require.NoError(t, exitErr, "SIGTERM exits 0")
		require.Less(t, exited, shutdownBound, "exit within the documented bound")
		require.Empty(t, c.dropped, "a client saw a connection dropped mid-request")

		r := s.waitState(run.ID, 30*time.Second, "succeeded", "failed", "cancelled", "timed_out", "expired")
		require.Equal(t, "succeeded", r.State, runSummary(r))
		require.Len(t, r.Attempts, 1, "the job was not stopped and re-run: %s", runSummary(r))
	})
}

// TestRestartFigures measures JOBPLANE_RESTART_FIGURES=N SIGTERM restarts
// of a SQLite server with an idle long-polling worker, a job on a 4 s lease
// and four clients in flight, and logs the figures docs/operations.md
// quotes. JOBPLANE_E2E_BINARY names another build to measure (an older
// release, for the before figures). It asserts nothing: it is a measurement.
func TestRestartFigures(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("JOBPLANE_RESTART_FIGURES"))
	if n <= 0 {
		t.Skip("set JOBPLANE_RESTART_FIGURES=N to measure N SIGTERM restarts")
	}
	e := newEnv(t, shutdownJobs)
	s := startServer(t, backends[0].dsn(t), e)
	startWorker(t, s, "worker-busy", t.TempDir(), s.registrationToken())
	startWorker(t, s, "worker-idle", t.TempDir(), s.registrationToken())
	var times []time.Duration
	codes := map[string]int{}
	reruns, dropped, refused, answered := 0, 0, 0, 0
	var samples []string
	for i := range n {
		run := s.createRun("short-lease")
		s.waitState(run.ID, 20*time.Second, "running")
		time.Sleep(300 * time.Millisecond)
		c := startClients(s, 4)
		time.Sleep(300 * time.Millisecond)
		down := time.Now()
		exited, exitErr := sigterm(t, s)
		s.start()
		ready := time.Since(down)
		c.finish()
		times = append(times, exited)
		code := "0"
		if exitErr != nil {
			code = exitErr.Error()
		}
		codes[code]++
		dropped += len(c.dropped)
		refused += c.refused
		answered += c.ok
		if len(c.dropped) > 0 && len(samples) < 5 {
			samples = append(samples, c.dropped[0])
		}
		r := s.waitState(run.ID, 40*time.Second, "succeeded", "failed", "cancelled", "timed_out", "expired")
		if len(r.Attempts) > 1 || r.State != "succeeded" {
			reruns++
		}
		t.Logf("restart %d: exit %s in %s, ready again after %s; clients %d answered, %d refused, %d dropped; run %s in %d attempt(s)",
			i+1, code, exited.Round(time.Millisecond), ready.Round(time.Millisecond), c.ok, c.refused, len(c.dropped), r.State, len(r.Attempts))
	}
	slices.Sort(times)
	t.Logf("FIGURES %s: %d restarts; time to exit min %s median %s max %s; exit codes %v; jobs stopped and re-run %d/%d; client requests answered %d, refused %d, dropped mid-request %d %v",
		binary, n, times[0].Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond),
		codes, reruns, n, answered, refused, dropped, samples)
}
