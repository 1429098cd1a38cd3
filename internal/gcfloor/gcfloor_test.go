package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name              string
		live, scan, floor uint64
		want              int
	}{
		{"small heap: grow to the floor", 20 * mib, 24 * mib, 256 * mib, 983},       // 20 + 24×9.83 ≈ 256
		{"heap near the floor: Go's default", 200 * mib, 210 * mib, 256 * mib, 100}, // (256-200)/210 < 1
		{"heap above the floor", 400 * mib, 420 * mib, 256 * mib, 100},
		{"nothing live yet: bounded", 0, 1, 256 * mib, maxPercent},
		{"no scan figure", 10 * mib, 0, 256 * mib, 100},
		{"live plus scan at the floor", 128 * mib, 128 * mib, 256 * mib, 100},
	} {
		if got := Percent(c.live, c.scan, c.floor); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d) = %d, want %d", c.name, c.live, c.scan, c.floor, got, c.want)
		}
	}
	// The heap goal it gives never passes the floor, unless Go's own
	// default would.
	for live := uint64(0); live < 300*mib; live += 7 * mib {
		scan := live + 3*mib
		p := Percent(live, scan, 256*mib)
		if goal := live + scan*uint64(p)/100; p > 100 && goal > 256*mib {
			t.Errorf("live %d MiB: GOGC %d gives a goal of %d MiB, above the floor", live/mib, p, goal/mib)
		}
	}
}

func TestStartRaisesAndRestores(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	runtime.GC()
	stop := Start(512<<20, time.Hour)
	// A test binary's live heap is a few MiB: the collector may wait for
	// far more than that.
	got := debug.SetGCPercent(-1)
	debug.SetGCPercent(got)
	if got <= 100 {
		t.Fatalf("GOGC after Start = %d, want above 100 for a small heap under a 512 MiB floor", got)
	}
	stop()
	stop() // idempotent
	if after := debug.SetGCPercent(100); after != 100 {
		t.Fatalf("GOGC after stop = %d, want the 100 found at Start", after)
	}
}

// TestStartLeavesGOGCAlone: an operator's GOGC in the environment, or a
// floor of 0, leaves the collector as it was.
func TestStartLeavesGOGCAlone(t *testing.T) {
	for _, c := range []struct {
		name, env string
		floor     uint64
		percent   int
	}{
		{"GOGC=150 in the environment", "150", 512 << 20, 150},
		{"a floor of 0", "", 0, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOGC", c.env)
			before := debug.SetGCPercent(c.percent)
			defer debug.SetGCPercent(before)
			stop := Start(c.floor, time.Hour)
			defer stop()
			if got := debug.SetGCPercent(c.percent); got != c.percent {
				t.Fatalf("GOGC = %d with %s, want it left at %d", got, c.name, c.percent)
			}
		})
	}
}
