package logging_test

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobplane/jobplane/internal/logging"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// noTime drops the time, so that lines are the same on every run.
func noTime(groups []string, a slog.Attr) *slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return nil
	}
	return &a
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(p, got, 0o644))
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run go test -update to write %s", p)
	require.Equal(t, string(want), string(got))
}

// The lines a log pipeline parses, byte for byte: what the server logs
// about an attempt, inside a traced request and outside one.
func TestGoldenLines(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log, err := logging.New(&buf, logging.Options{Level: "debug", Format: format, ReplaceAttr: noTime})
			require.NoError(t, err)
			w := log.With("runner_id", "rnr_01HZX3Q9V6S8K2M4N5P7R9T1W3")
			a := w.With("run_id", "run_01HZX3QA0000000000000000", "attempt_id", "att_01HZX3QB0000000000000000")
			a.InfoContext(traced, "worker: attempt finished", "outcome", "succeeded", "exit_code", 0, "summary", "ok")
			a.Warn("worker: renew failed", "error", "connection refused")
			w.DebugContext(traced, "worker: claim", "slots", 4)
			golden(t, "lines."+format, buf.Bytes())
		})
	}
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	_, err := logging.New(&bytes.Buffer{}, logging.Options{Format: "xml"})
	require.ErrorContains(t, err, "--log-format")
	_, err = logging.New(&bytes.Buffer{}, logging.Options{Level: "loud"})
	require.ErrorContains(t, err, "--log-level")
}
