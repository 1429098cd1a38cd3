// Package clock is the only source of time for jobplane's logic.
//
// Production code receives a Clock and never calls time.Now directly, so lease
// expiry, retries, approval windows and signature skew can be tested by moving a
// fake clock instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	// Now is for in-process deadline arithmetic; it keeps the monotonic reading.
	Now() time.Time
	// NowOrNil is nil in production, so that the store uses the database's
	// statement clock, and the fake time in tests.
	NowOrNil() *time.Time
}

// NowOrZero is c's NowOrNil as a value, for a row's time field: the fake
// time in tests and the zero time in production, which the store replaces
// with the database's.
func NowOrZero(c Clock) time.Time {
	if n := c.NowOrNil(); n != nil {
		return *n
	}
	return time.Time{}
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NowOrNil returns nil: the database decides.
func (Real) NowOrNil() *time.Time { return nil }

// Fake is a manually advanced clock for tests. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t.UTC().Truncate(time.Microsecond)} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NowOrNil returns the fake time.
func (f *Fake) NowOrNil() *time.Time {
	t := f.Now()
	return &t
}

// Advance moves the clock forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t.UTC().Truncate(time.Microsecond)
	f.mu.Unlock()
}
