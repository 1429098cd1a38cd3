package executor

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
)

// TestBound: Extend never moves the bound earlier and sends what is left
// of it on the worker's clock; with a clock that is not the machine's the
// bound is re-sent until Close, with the machine's it is not.
func TestBound(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Unix(1000, 0))
	var mu sync.Mutex
	var sent []time.Duration
	b := NewBound(fake, fake.Now().Add(5*time.Second), func(left time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, left)
	})
	b.Extend(fake.Now().Add(2 * time.Second)) // earlier: ignored
	b.Extend(fake.Now().Add(8 * time.Second))
	require.Equal(t, fake.Now().Add(8*time.Second), b.Until())
	fake.Advance(10 * time.Second)
	b.Extend(time.Time{})
	mu.Lock()
	require.Equal(t, []time.Duration{5 * time.Second, 8 * time.Second, 0}, sent, "never negative")
	sent = nil
	mu.Unlock()

	b.Follow()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) >= 2 }, 5*time.Second, 10*time.Millisecond)
	b.Close()
	mu.Lock()
	n := len(sent)
	mu.Unlock()
	time.Sleep(3 * FollowEvery)
	mu.Lock()
	require.Equal(t, n, len(sent), "re-sent after Close")
	mu.Unlock()

	calls := 0
	real := NewBound(clock.Real{}, time.Now().Add(time.Minute), func(time.Duration) { calls++ })
	real.Follow()
	time.Sleep(3 * FollowEvery)
	real.Close()
	require.Zero(t, calls, "a bound on the machine's clock needs no re-sending")
}
