package container

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/containertest"
)

// slowEngine is a proxy in front of an engine's unix socket that holds each
// image request (inspect, pull) for delay before passing it on, as a slow
// registry makes a pull.
func slowEngine(t *testing.T, host string, delay time.Duration) string {
	t.Helper()
	target := strings.TrimPrefix(host, "unix://")
	sock := filepath.Join(t.TempDir(), "slow.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				up, err := net.Dial("unix", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(c, up); c.Close() }()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if line, _, _ := bytes.Cut(buf[:n], []byte("\r\n")); bytes.Contains(line, []byte("/images/")) {
							time.Sleep(delay)
						}
						if _, werr := up.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return "unix://" + sock
}

// TestBoundReadAfterASlowPull: a start whose image look-up takes longer
// than the bound the worker had when it began (a slow pull) gives the job
// the bound the worker's renewals have since moved it to (Spec.Renewed),
// so the job runs to its end. The stale variant (no Renewed) shows that
// the bound read before the pull would have killed it at once.
func TestBoundReadAfterASlowPull(t *testing.T) {
	h := newHarness(t)
	cl, err := client.New(client.WithHost(slowEngine(t, h.eng.Host, 2500*time.Millisecond)))
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	var ul []Ulimit
	for _, s := range containertest.Ulimits {
		u, _ := ParseUlimit(s)
		ul = append(ul, u)
	}
	x, err := New(Config{Client: cl, Image: h.image, Supervisor: h.supervisor, Ulimits: ul, Clock: clock.Real{}})
	require.NoError(t, err)
	for _, renewed := range []bool{true, false} {
		o := &output{}
		spec := h.spec(t, o, "sh", "-c", "sleep 2; echo alive")
		spec.Until = time.Now().Add(time.Second)
		if renewed {
			spec.Renewed = func() time.Time { return time.Now().Add(30 * time.Second) }
		}
		began := time.Now()
		j, err := x.Start(t.Context(), spec)
		require.NoError(t, err)
		require.Greater(t, time.Since(began), 2*time.Second, "the proxy did not slow the start")
		exit := j.Wait()
		if renewed {
			require.Equal(t, 0, exit.Code, "%+v %q", exit, o.get("stderr"))
			require.Equal(t, []string{"alive"}, o.get("stdout"))
			continue
		}
		require.NotEqual(t, 0, exit.Code, "the stale bound must have ended the job: %+v", exit)
		require.Empty(t, o.get("stdout"))
	}
}
