package executor

import (
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
)

// FollowEvery is how often a Bound re-sends itself when the worker's clock
// is not the machine's (see Bound.Follow).
const FollowEvery = 100 * time.Millisecond

// Bound is the instant by which a job must be gone, as the worker extends
// it, and its delivery to the job's supervisor: the supervisor takes a
// bound as a duration from now, measured on the machine's monotonic clock.
type Bound struct {
	clk  clock.Clock
	send func(left time.Duration)

	mu    sync.Mutex
	until time.Time

	following chan struct{} // nil when not following
	followed  sync.WaitGroup
	closeOnce sync.Once
}

// NewBound returns the bound until, on clk (the worker's clock), that send
// delivers: send is given what is left of it (never negative) and must not
// block for long.
func NewBound(clk clock.Clock, until time.Time, send func(left time.Duration)) *Bound {
	return &Bound{clk: clk, until: until, send: send}
}

// Until returns the latest bound.
func (b *Bound) Until() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.until
}

// Extend moves the bound to until (never earlier: an earlier until is
// ignored) and sends the latest bound.
func (b *Bound) Extend(until time.Time) {
	b.mu.Lock()
	if until.After(b.until) {
		b.until = until
	}
	until = b.until
	b.mu.Unlock()
	b.send(max(0, until.Sub(b.clk.Now())))
}

// Follow re-sends the bound every FollowEvery until Close, when the
// worker's clock is not the machine's and there is a bound. The supervisor
// measures a bound on the machine's monotonic clock; a worker given another
// clock (a test's fake or skewed one) would otherwise see its job end on a
// schedule its own clock does not show. With the machine's clock every
// re-send names the same instant, so Follow does nothing.
func (b *Bound) Follow() {
	if _, real := b.clk.(clock.Real); real || b.Until().IsZero() {
		return
	}
	b.following = make(chan struct{})
	b.followed.Go(func() {
		t := time.NewTicker(FollowEvery)
		defer t.Stop()
		for {
			select {
			case <-b.following:
				return
			case <-t.C:
				b.Extend(time.Time{})
			}
		}
	})
}

// Close stops following and waits for the last re-send to return.
func (b *Bound) Close() {
	b.closeOnce.Do(func() {
		if b.following != nil {
			close(b.following)
			b.followed.Wait()
		}
	})
}
