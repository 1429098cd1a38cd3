package bench

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// The idle measurement: N runners each hold a long-polling claim on one
// server while nothing is queued. It reports the process's memory at that
// point and then the dispatch latency of runs requested one at a time while
// all of them wait. Server and runners share this process (and its file
// descriptors: each waiting runner is two sockets), so the memory figures
// are an upper bound of the server's.

// IdleWait is the long poll of the idle runners' claims.
const IdleWait = 25

// Idle is the outcome of the idle measurement.
type Idle struct {
	Runners int `json:"runners"`
	// Waiting is the number of claims in flight when memory was read.
	Waiting int `json:"waiting"`
	// Memory, in MiB: the Go heap in use, goroutine stacks, all memory the
	// Go runtime holds, and the resident set of the process.
	HeapMiB  float64 `json:"heap_mib"`
	StackMiB float64 `json:"stack_mib"`
	SysMiB   float64 `json:"sys_mib"`
	RSSMiB   float64 `json:"rss_mib"`
	// Baseline is the same, before the runners started waiting.
	BaselineRSSMiB float64 `json:"baseline_rss_mib"`
	// IdleCPU is the process CPU per second of wall time while they waited.
	IdleCPU float64 `json:"idle_cpu"`
	// Procs is the number of child processes the runners lived in (0: this
	// process, and the memory figures are server and runners together).
	Procs int `json:"procs,omitempty"`
	// RunnersRSSMiB is the children's resident sets, summed.
	RunnersRSSMiB float64 `json:"runners_rss_mib,omitempty"`
	// Dispatch is the paced lifecycle with all N runners waiting.
	Dispatch        Phase   `json:"dispatch"`
	DispatchLatency Latency `json:"dispatch_latency"`
}

// RunIdle registers n runners, has them all wait in long polls, reads the
// memory, then measures dispatch latency over `runs` runs requested one at a
// time.
func (e *Env) RunIdle(ctx context.Context, n, runs int) (*Idle, error) {
	runners, err := e.registerParallel(ctx, n, 8)
	if err != nil {
		return nil, err
	}
	out := &Idle{Runners: n, BaselineRSSMiB: rssMiB()}
	var waiting atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	g, gctx := newGroup(wctx)
	for _, r := range runners {
		g.Go(func() error {
			for gctx.Err() == nil {
				waiting.Add(1)
				asg, err := r.Client.Claim(gctx, IdleWait, "")
				waiting.Add(-1)
				if gctx.Err() != nil {
					return nil
				}
				if err != nil {
					return fmt.Errorf("runner %s: idle claim: %w", r.ID, err)
				}
				if asg != nil {
					return fmt.Errorf("runner %s: idle claim got run %s, but nothing was queued", r.ID, asg.RunID)
				}
			}
			return nil
		})
	}
	// Wait until every runner's claim waits on the server, then a little
	// longer for the arrival's work to settle.
	if err := e.awaitWaiting(gctx, n); err != nil {
		cancel()
		return nil, errors.Join(err, g.Wait())
	}
	time.Sleep(2 * time.Second)
	cpu0, t0 := processCPU(), clock.Real{}.Now()
	time.Sleep(5 * time.Second)
	out.IdleCPU = float64(processCPU()-cpu0) / float64(clock.Real{}.Now().Sub(t0))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out.Waiting = int(waiting.Load())
	out.HeapMiB, out.StackMiB, out.SysMiB = mib(ms.HeapInuse), mib(ms.StackInuse), mib(ms.Sys)
	out.RSSMiB = rssMiB()
	cancel()
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if t, ok := e.HTTP.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	dl, err := e.RunLifecycle(ctx, runners, runs, 1, true, nil)
	if err != nil {
		return nil, err
	}
	v, err := e.Verify(ctx, dl.Requested, dl.Claims)
	if err != nil {
		return nil, err
	}
	if err := v.Err(); err != nil {
		return out, err
	}
	out.Dispatch, out.DispatchLatency = dl.Phase, dl.RequestToClaimed
	return out, nil
}

func (e *Env) registerParallel(ctx context.Context, n, par int) ([]*Runner, error) {
	out := make([]*Runner, n)
	var next atomic.Int64
	g, gctx := newGroup(ctx)
	for range par {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return nil
				}
				tok, err := e.Admin.CreateRegistrationToken(gctx, protocol.RegistrationTokenRequest{Pool: "default", TTLSeconds: 600})
				if err != nil {
					return fmt.Errorf("registration token %d: %w", i, err)
				}
				pub, priv, err := ed25519.GenerateKey(rand.Reader)
				if err != nil {
					return err
				}
				rc := &apiclient.RunnerClient{BaseURL: e.URL, Key: priv, HTTP: e.HTTP}
				resp, err := rc.Register(gctx, tok.Token, protocol.RegisterRequest{
					Name: fmt.Sprintf("idle-%d", i), PublicKey: protocol.EncodeKey(pub), Version: "bench",
				})
				if err != nil {
					return fmt.Errorf("register runner %d: %w", i, err)
				}
				rc.RunnerID = resp.RunnerID
				out[i] = &Runner{ID: resp.RunnerID, Client: rc}
			}
		})
	}
	return out, g.Wait()
}

func mib(b uint64) float64 { return float64(b*10/(1<<20)) / 10 }

// rssMiB reads this process's VmRSS (Linux); 0 elsewhere.
func rssMiB() float64 { return statusRSSMiB("/proc/self/status") }

func statusRSSMiB(path string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb*10/1024) / 10
		}
	}
	return 0
}
