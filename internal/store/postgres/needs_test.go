package postgres

import (
	"slices"
	"testing"

	"github.com/jobplane/jobplane/internal/store"
)

func TestNeedsArgIsEverySubset(t *testing.T) {
	for caps := store.Capabilities(0); caps < 8; caps++ {
		got := NeedsArg(caps)
		var want []int32
		for needs := store.Capabilities(0); needs < 8; needs++ {
			if needs&^caps == 0 {
				want = append(want, int32(needs))
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("NeedsArg(%03b) = %v, want %v", caps, got, want)
		}
	}
}
