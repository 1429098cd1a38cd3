package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseArchiveAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{"1s": time.Second, "30m": 30 * time.Minute, "2d": 48 * time.Hour, "3650d": 3650 * 24 * time.Hour} {
		got, err := parseArchiveAfter(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "0s", "500ms", "-1h", "0d", "3651d", "1.5d", "d", "1w", "1h\x00"} {
		_, err := parseArchiveAfter(in)
		require.Error(t, err, "%q", in)
	}
}
