package catalog

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetention(t *testing.T) {
	t.Parallel()

	good := map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "1d": 24 * time.Hour, "12h": 12 * time.Hour, "90m": 90 * time.Minute,
		"3650d": MaxRetention, "1h": MinRetention,
	}
	for in, want := range good {
		got, err := ParseRetention(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		back, err := ParseRetention(FormatRetention(got))
		require.NoError(t, err, in)
		require.Equal(t, got, back, in)
	}
	for _, in := range []string{"", "d", "0d", "-1d", "30", "30 days", "59m", "3651d", "99999999999999999999d", "1.5d", "+3d", "1w"} {
		_, err := ParseRetention(in)
		require.Error(t, err, in)
	}
}

func TestJobRetention(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("jobs/hello.yaml", minimalJob+"retention: {logs: 30d, artifacts: 36h}\n"))
	j, _ := c.Job("hello")
	require.Equal(t, &Retention{Logs: 30 * 24 * time.Hour, Artifacts: 36 * time.Hour}, j.Retention)
	b, err := json.Marshal(j)
	require.NoError(t, err)
	require.Contains(t, string(b), `"retention":{"logs":"30d","artifacts":"36h"}`)

	c = mustParse(t, files("jobs/hello.yaml", minimalJob+"retention: {logs: 7d}\n"))
	j, _ = c.Job("hello")
	require.Equal(t, &Retention{Logs: 7 * 24 * time.Hour}, j.Retention)

	c = mustParse(t, files("jobs/hello.yaml", minimalJob))
	j, _ = c.Job("hello")
	require.Nil(t, j.Retention)

	for _, tt := range []struct {
		body              string
		line, col         int
		field, msgContain string
	}{
		{"retention: {logs: 10m}\n", 4, 19, "retention.logs", "between 1h and 3650d"},
		{"retention: {logs: 30 days}\n", 4, 19, "retention.logs", "invalid period"},
		{"retention: {artifacts: 7}\n", 4, 24, "retention.artifacts", "must be a string"},
		{"retention: {audit: 7d}\n", 4, 13, "retention.audit", `unknown field "audit"`},
		{"retention: 7d\n", 4, 12, "retention", "must be a mapping"},
	} {
		requireJobError(t, tt.body, tt.line, tt.col, tt.field, tt.msgContain)
	}
}
