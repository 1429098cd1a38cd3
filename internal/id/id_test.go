package id

import (
	"testing"
	"time"
)

// A Seq's identifiers sort in the order they were made: within one
// millisecond, across milliseconds, when the clock steps back, and when
// counting up carries into the high bytes.
func TestSeqSorts(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var s Seq
	prev := ""
	check := func(got string) {
		t.Helper()
		if got <= prev {
			t.Fatalf("%s made after %s does not sort after it", got, prev)
		}
		if len(got) != len(Run)+26 {
			t.Fatalf("%s: length %d", got, len(got))
		}
		prev = got
	}
	for i := range 5000 {
		check(s.Next(Run, t0.Add(time.Duration(i/1000)*time.Millisecond)))
	}
	check(s.Next(Run, t0)) // the clock stepped back
	// A counter about to carry out of the low eight bytes.
	for i := 8; i < 16; i++ {
		s.last[i] = 0xff
	}
	check(s.Next(Run, t0))
	check(s.Next(Run, t0))
	// A later millisecond starts afresh, still after everything before.
	check(s.Next(Run, t0.Add(time.Second)))
	if got := New(Run, t0.Add(2*time.Second)); got <= prev {
		t.Fatalf("New at a later millisecond %s sorts before %s", got, prev)
	}
}
