package worker

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

func TestTrustUntil(t *testing.T) {
	t.Parallel()
	sent := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		ttl  time.Duration
		want time.Duration
	}{
		{2 * time.Second, time.Second},       // margin floor of 1 s
		{10 * time.Second, 9 * time.Second},  // max(1 s, 1 s)
		{30 * time.Second, 27 * time.Second}, // TTL/10
		{time.Hour, 54 * time.Minute},
	}
	for _, tt := range tests {
		got := trustUntil(sent, tt.ttl).Sub(sent)
		require.Equal(t, tt.want, got, "trustUntil(sent, %s) = sent+%s, want sent+%s", tt.ttl, got, tt.want)
	}
	require.Equal(t, minTTL, leaseTTL(0))
	require.True(t, jobDeadline(sent, 0, time.Minute).IsZero())
	dl := jobDeadline(sent, 600, 30*time.Second)
	require.Equal(t, 597*time.Second, dl.Sub(sent))
	require.Equal(t, dl, capAt(trustUntil(sent.Add(590*time.Second), 30*time.Second), dl), "never trust beyond the job deadline")
}

func TestParamVars(t *testing.T) {
	t.Parallel()
	got, err := paramVars(json.RawMessage(`{"a.b":"x","n":1.5,"l":[1, 2],"nil":null}`))
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"JOBPLANE_PARAM_A_B": "x", "JOBPLANE_PARAM_N": "1.5", "JOBPLANE_PARAM_L": "[1,2]", "JOBPLANE_PARAM_NIL": "null",
	}, got)
	_, err = paramVars(json.RawMessage(`{"a-b":"1","a_b":"2"}`))
	require.ErrorContains(t, err, "both map to JOBPLANE_PARAM_A_B")
	_, err = paramVars(json.RawMessage(`[1]`))
	require.Error(t, err)
	got, err = paramVars(nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := Config{Server: "http://localhost:8080", StateDir: "/tmp/x"}
	require.NoError(t, good.Validate())
	tests := []struct {
		field string
		edit  func(*Config)
	}{
		{"Server", func(c *Config) { c.Server = "" }},
		{"Server", func(c *Config) { c.Server = "localhost:8080" }},
		{"StateDir", func(c *Config) { c.StateDir = "" }},
		{"Concurrency", func(c *Config) { c.Concurrency = -1 }},
		{"WaitSeconds", func(c *Config) { c.WaitSeconds = 31 }},
		{"HTTP", func(c *Config) { c.HTTP = &http.Client{Timeout: 20 * time.Second} }},
	}
	for _, tt := range tests {
		c := good
		tt.edit(&c)
		var ce *ConfigError
		require.True(t, errors.As(c.Validate(), &ce), "Validate() after editing %s", tt.field)
		require.Equal(t, tt.field, ce.Field)
	}
}

// A held shipper sends nothing at its ticks (the lines after the process
// ended wait for the result), except a chunk that fills up; at close the
// last chunk is kept for the result.
func TestShipperHold(t *testing.T) {
	var mu sync.Mutex
	var sent []protocol.LogsRequest
	s := newShipper(time.Now, time.Millisecond, func(r protocol.LogsRequest) bool {
		mu.Lock()
		sent = append(sent, r)
		mu.Unlock()
		return true
	})
	s.add("stdout", "before")
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) == 1 }, 5*time.Second, time.Millisecond)
	s.hold()
	s.add("system", "jobplane: process ended: exit status 0")
	time.Sleep(30 * time.Millisecond) // thirty ticks
	mu.Lock()
	require.Len(t, sent, 1, "a held line was sent at a tick")
	mu.Unlock()
	last := s.closeKeepingLast()
	require.NotNil(t, last)
	require.Equal(t, int64(2), last.Seq)
	require.Equal(t, "jobplane: process ended: exit status 0", last.Lines[0].Text)
	mu.Lock()
	require.Len(t, sent, 1)
	mu.Unlock()

	// A full chunk still goes while held.
	s2 := newShipper(time.Now, time.Hour, func(r protocol.LogsRequest) bool {
		mu.Lock()
		sent = append(sent, r)
		mu.Unlock()
		return true
	})
	s2.hold()
	for range maxChunkLines + 1 {
		s2.add("stdout", "x")
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) == 2 }, 5*time.Second, time.Millisecond)
	last = s2.closeKeepingLast()
	require.NotNil(t, last)
	require.Len(t, last.Lines, 1)
}
