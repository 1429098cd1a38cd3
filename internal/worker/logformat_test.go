package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/logging"
)

// lockedBuffer is a log sink the worker's goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestJSONLogLinesCarryIDs runs a job under a worker that logs JSON: every
// line is one JSON object; once the runner is known every line names it;
// every line about the attempt names its run and attempt; and the job's
// own output is not in the worker's log (it goes to the server).
func TestJSONLogLinesCarryIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := assignment(b.out, "sh", "-c", "echo JOB-OUTPUT-7f3a; echo JOB-ERROR-7f3a >&2")
	b.srv.enqueue(a)
	var sink lockedBuffer
	log, err := logging.New(&sink, logging.Options{Level: "debug", Format: "json"})
	require.NoError(t, err)
	cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
	cfg.Logger = log
	cancel, done := startWorker(t, cfg)
	b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
	cancel()
	require.NoError(t, <-done)

	out := sink.String()
	require.NotContains(t, out, "7f3a", "the job's output stays out of the worker's log")
	started, attemptLines := false, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "not a JSON object: %s", sc.Text())
		for _, k := range []string{"time", "level", "msg"} {
			require.Contains(t, line, k, "line %s", sc.Text())
		}
		msg := line["msg"].(string)
		if msg == "worker: started" {
			started = true
		}
		if started {
			require.Equal(t, b.srv.runnerID(), line["runner_id"], "line %s", sc.Text())
		}
		if strings.HasPrefix(msg, "worker: attempt") {
			attemptLines++
			require.Equal(t, a.RunID, line["run_id"], "line %s", sc.Text())
			require.Equal(t, a.AttemptID, line["attempt_id"], "line %s", sc.Text())
		}
	}
	require.True(t, started, "log:\n%s", out)
	require.GreaterOrEqual(t, attemptLines, 2, "assigned and finished, log:\n%s", out)
}

// runnerID is the one runner the fake registered.
func (s *fakeServer) runnerID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.runners {
		return id
	}
	return ""
}
