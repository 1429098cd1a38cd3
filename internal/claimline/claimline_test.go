package claimline_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/claimline"
)

// TestClaimLines: only the head watches; a successful claimer pokes the next
// two waiters that are not looking; a leaving head pokes its successor.
func TestClaimLines(t *testing.T) {
	var d claimline.Lines
	ws := make([]*claimline.Waiter, 4)
	for i := range ws {
		ws[i] = d.Join("s")
		d.SetTrying(ws[i], false)
	}
	other := d.Join("o")
	d.SetTrying(other, false)
	require.True(t, d.IsHead("s", ws[0]))
	require.False(t, d.IsHead("s", ws[1]))
	require.Equal(t, 5, d.Waiting())

	poked := func(w *claimline.Waiter) bool {
		select {
		case <-w.Poked():
			return true
		default:
			return false
		}
	}
	d.SetTrying(ws[0], true)
	d.PokeNext("s", 2)
	require.False(t, poked(ws[0]), "a waiter already looking is not poked")
	require.True(t, poked(ws[1]))
	require.True(t, poked(ws[2]))
	require.False(t, poked(ws[3]))
	require.False(t, poked(other), "another scope's line is not poked")

	d.Leave("s", ws[0])
	require.True(t, d.IsHead("s", ws[1]))
	require.True(t, poked(ws[1]), "the new head is poked so that it starts watching")
	d.Leave("s", ws[2])
	require.False(t, poked(ws[1]) || poked(ws[3]), "leaving from the middle pokes nobody")
	d.Leave("s", ws[1])
	d.Leave("s", ws[3])
	d.Leave("o", other)
	require.Equal(t, 0, d.Waiting())
}
