package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 8, 14, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                          {},
		"2026-08-01T10:00:00Z":      time.Date(2026, 8, 1, 10, 0, 0, 0, time.UTC),
		"2026-08-01T10:00:00+02:00": time.Date(2026, 8, 1, 8, 0, 0, 0, time.UTC),
		"2026-08-01":                time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC),
		"24h":                       now.Add(-24 * time.Hour),
		"90m":                       now.Add(-90 * time.Minute),
	} {
		got, err := parseSince(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "parseSince(%q) = %v, want %v", in, got, want)
	}
	for _, bad := range []string{"yesterday", "-1h", "2026-13-01", "12"} {
		_, err := parseSince(bad, now)
		require.ErrorContains(t, err, "--since", bad)
	}
}
