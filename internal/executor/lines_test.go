package executor

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadLinesSplitsLongLinesOnRuneBoundaries(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", MaxLineBytes) // 2 bytes each: 128 KiB
	in := "a\r\n" + long + "\nlast"
	var got []string
	ReadLines(strings.NewReader(in), func(s string) { got = append(got, s) })
	require.Equal(t, "a", got[0])
	require.Equal(t, "last", got[len(got)-1])
	joined := strings.Join(got[1:len(got)-1], "")
	require.Equal(t, long, joined)
	for _, piece := range got {
		require.LessOrEqual(t, len(piece), MaxLineBytes)
		require.True(t, strings.ToValidUTF8(piece, "?") == piece, "a piece was cut inside a rune")
	}
}
