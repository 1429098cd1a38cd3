package gcfloor

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// DefaultFloor is the heap `jobplane server` lets grow before collecting.
const DefaultFloor = 256 << 20

// maxPercent bounds GOGC, so that a live heap of almost nothing (just
// after start) does not leave the collector off.
const maxPercent = 5000

// Percent is the GOGC that lets a heap whose collector scans scan bytes
// (live heap, goroutine stacks and globals), of which live is the live
// heap, grow to floor before the next collection; never below Go's
// default of 100, nor above maxPercent. The runtime's heap goal is
// live + scan×GOGC/100.
func Percent(live, scan, floor uint64) int {
	if scan == 0 || live+scan >= floor {
		return 100
	}
	p := (floor - live) * 100 / scan
	switch {
	case p < 100:
		return 100
	case p > maxPercent:
		return maxPercent
	}
	return int(p)
}

// Start adjusts GOGC every interval from the live heap (Percent) until
// stop is called, which puts back the GOGC it found. It does nothing when
// floor is 0 or when the GOGC environment variable is set: the operator
// chose.
func Start(floor uint64, interval time.Duration) (stop func()) {
	if floor == 0 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	t := &tuner{floor: floor, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
	}}
	t.orig = debug.SetGCPercent(100)
	t.current = 100
	t.adjust()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				t.adjust()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			debug.SetGCPercent(t.orig)
		})
	}
}

type tuner struct {
	floor         uint64
	samples       []metrics.Sample
	orig, current int
}

func (t *tuner) adjust() {
	metrics.Read(t.samples)
	var v [3]uint64
	for i, s := range t.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	p := Percent(v[0], v[0]+v[1]+v[2], t.floor)
	// A change of less than a tenth is not worth the heap lock it takes.
	if d := p - t.current; d*10 > t.current || -d*10 > t.current {
		debug.SetGCPercent(p)
		t.current = p
	}
}
