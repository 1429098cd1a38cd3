package worker

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// skewedClock is a worker's wrong clock: off by offset from base and
// running at rate times base's speed from start.
type skewedClock struct {
	base   clock.Clock
	start  time.Time
	offset time.Duration
	rate   float64
}

func (c skewedClock) Now() time.Time {
	d := c.base.Now().Sub(c.start)
	return c.start.Add(c.offset + time.Duration(float64(d)*c.rate))
}

func (c skewedClock) NowOrNil() *time.Time {
	t := c.Now()
	return &t
}

// TestL5_WorkerClockOffsetAndRate (acceptance case L5): the worker's clock is
// off by ±10 minutes, or runs at twice or half the speed of the server's.
// Every renewal fails, so the worker must stop the job on its own, at its
// trust deadline (claim send time + TTL − margin) measured on its own
// clock. An offset changes nothing: signatures are corrected from the
// server's timestamp_skew answer, and the deadline is a duration, so the
// job stops at the same server time as with a right clock, before the
// server's expiry. A fast clock stops it early. A slow one stops it late by
// its own reckoning: no worker can see that, which is why the server's
// expiry (decided by its database clock alone) and fencing tokens, not the
// worker's stop, guard the key; docs/leases.md says so.
func TestL5_WorkerClockOffsetAndRate(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	window := ttl - trustMargin(ttl)
	for _, c := range []struct {
		offset time.Duration
		rate   float64
	}{{10 * time.Minute, 1}, {-10 * time.Minute, 1}, {0, 2}, {-10 * time.Minute, 2}, {0, 0.5}} {
		t.Run(fmt.Sprintf("offset=%s,rate=%g", c.offset, c.rate), func(t *testing.T) {
			t.Parallel()
			base := clock.NewFake(time.Now())
			b := setup(t, base)
			wclk := skewedClock{base: base, start: base.Now(), offset: c.offset, rate: c.rate}
			b.srv.renew = func(string, int) (int, string, bool) { return 503, protocol.CodeUnavailable, false }
			a := assignment(b.out, "sh", "-c", `sleep 60 & echo $! > "$OUT/pid"; wait`)
			a.Lease.TTLSeconds = int(ttl / time.Second)
			b.srv.enqueue(a)
			b.cancel, b.done = startWorker(t, testConfig(t, b.ts.URL, b.dir, wclk))
			pid := readPid(t, filepath.Join(b.out, "pid"))
			claimedAt := base.Now() // the claim was sent no later than this

			// Server time moves in 50 ms steps; find when the job dies.
			step := 50 * time.Millisecond
			var died time.Duration
			for elapsed := time.Duration(0); elapsed < 4*window; elapsed += step {
				if !alive(pid) {
					died = base.Now().Sub(claimedAt)
					break
				}
				base.Advance(step)
				time.Sleep(25 * time.Millisecond)
			}
			require.NotZero(t, died, "the job was never stopped")
			want := time.Duration(float64(window) / c.rate) // on the server's clock
			grace := time.Duration(float64(stopGrace(2*time.Second, ttl)) / c.rate)
			t.Logf("stopped %s after the claim (server time); own deadline at %s, server expiry at %s", died, want, ttl)
			require.GreaterOrEqual(t, died, want-grace-2*step, "stopped before its deadline")
			require.LessOrEqual(t, died, want+4*step, "stopped after its deadline")
			if c.rate >= 1 {
				require.Less(t, died, ttl, "a right or fast clock stops the job before the server's expiry")
			}
			b.srv.mu.Lock()
			defer b.srv.mu.Unlock()
			// Stopped for its deadline, the job is never reported a success.
			for _, r := range b.srv.results[a.AttemptID] {
				require.NotEqual(t, "succeeded", r.Outcome)
			}
		})
	}
}
