package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jobplane/jobplane/internal/tracing"
)

// TestJobGetsTraceparent: the job's TRACEPARENT puts it in its run's
// trace; with the worker tracing, its parent is the worker's attempt span,
// and without, the run's root. A TRACEPARENT the job's definition sets
// does not win.
func TestJobGetsTraceparent(t *testing.T) {
	t.Parallel()
	for _, traced := range []bool{false, true} {
		name := "worker not tracing"
		if traced {
			name = "worker tracing"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			a := assignment(b.out, "sh", "-c", `printf %s "$TRACEPARENT" > "$OUT/traceparent"`)
			a.Job.Env["TRACEPARENT"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			b.srv.enqueue(a)
			cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
			sr := tracetest.NewSpanRecorder()
			if traced {
				cfg.Tracing = tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
			}
			cancel, done := startWorker(t, cfg)
			b.srv.waitFor(t, "result", 15*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
			cancel()
			require.NoError(t, <-done)

			got, err := os.ReadFile(filepath.Join(b.out, "traceparent"))
			require.NoError(t, err)
			parts := strings.Split(string(got), "-")
			require.Len(t, parts, 4, "TRACEPARENT %q", got)
			require.Equal(t, tracing.RunTraceID(a.RunID), parts[1], "the job is in its run's trace")
			root := strings.Split(tracing.Traceparent(tracing.RunContext(t.Context(), a.RunID)), "-")[2]
			if !traced {
				require.Equal(t, root, parts[2], "the run's root is the job's parent")
				require.Empty(t, sr.Ended())
				return
			}
			spans := sr.Ended()
			require.Len(t, spans, 1)
			s := spans[0]
			require.Equal(t, "attempt backfill-account", s.Name())
			require.Equal(t, s.SpanContext().SpanID().String(), parts[2], "the attempt span is the job's parent")
			require.Equal(t, root, s.Parent().SpanID().String())
			b.srv.mu.Lock()
			defer b.srv.mu.Unlock()
			require.Contains(t, b.srv.traceparents, "00-"+parts[1]+"-"+parts[2]+"-01", "the attempt's requests carry its trace")
		})
	}
}
