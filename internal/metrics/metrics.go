package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/store"
)

// GaugeSource is what the scrape-time gauges read.
type GaugeSource interface {
	MetricsGauges(ctx context.Context, now *time.Time) (*store.Gauges, error)
}

// Metrics is the registry and the instruments the server feeds.
type Metrics struct {
	reg       *prometheus.Registry
	claim     *prometheus.HistogramVec
	decisions *prometheus.CounterVec
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	swept     *prometheus.CounterVec
	log       *slog.Logger
}

// New builds the registry. src may be nil (no database gauges).
func New(src GaugeSource, clk clock.Clock, log *slog.Logger) *Metrics {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		log: log,
		claim: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jobplane_claim_latency_seconds",
			Help:    "Time an attempt waited from becoming claimable (created, or its retry backoff over) to being claimed.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 15, 60, 300, 1800},
		}, []string{"pool"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobplane_policy_decisions_total",
			Help: "Policy decisions by stage (request, dispatch) and outcome (allow, deny, needs_approval).",
		}, []string{"stage", "outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobplane_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jobplane_http_request_duration_seconds",
			Help:    "HTTP request duration by route pattern (long polls included).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
		}, []string{"route"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobplane_swept_total",
			Help: "Things background sweeps removed, by kind (staged_upload: an upload a crash left staged in the object store).",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(m.claim, m.decisions, m.requests, m.duration, m.swept,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if src != nil {
		m.reg.MustRegister(&dbCollector{src: src, clock: clk, log: log})
	}
	return m
}

// Registry is the registry behind Handler (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{m.log}, ErrorHandling: promhttp.ContinueOnError})
}

// Claimed implements control.Observer.
func (m *Metrics) Claimed(pool string, queued time.Duration) {
	m.claim.WithLabelValues(pool).Observe(queued.Seconds())
}

// PolicyDecision implements control.Observer.
func (m *Metrics) PolicyDecision(stage, outcome string) {
	m.decisions.WithLabelValues(stage, outcome).Inc()
}

// Swept implements control.Observer.
func (m *Metrics) Swept(kind string, n int) {
	m.swept.WithLabelValues(kind).Add(float64(n))
}

// Instrument counts requests by the route pattern the mux matched (never
// the raw path: IDs in paths would make one series per run) and logs each
// at debug level with the run and attempt it names.
func (m *Metrics) Instrument(next http.Handler, clk clock.Clock) http.Handler {
	if clk == nil {
		clk = clock.Real{}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := clk.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := r.Pattern // set in place by the ServeMux that dispatched
		if route == "" {
			route = "unmatched"
		}
		d := clk.Now().Sub(start)
		m.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
		m.duration.WithLabelValues(route).Observe(d.Seconds())
		if sw.err != nil {
			// The API's internal errors are logged here, where the request
			// is known, so that the line names its run, attempt and runner
			// (and, traced, its trace).
			attrs := append([]any{"route", route, "status", sw.status}, requestIDs(r)...)
			m.log.ErrorContext(r.Context(), "api: internal error", append(attrs, "err", sw.err)...)
		}
		if m.log.Enabled(r.Context(), slog.LevelDebug) {
			attrs := append([]any{"route", route, "status", sw.status, "duration_ms", d.Milliseconds()}, requestIDs(r)...)
			m.log.DebugContext(r.Context(), "api: request", attrs...)
		}
	})
}

// requestIDs are the run, attempt and runner a request names: a runner's
// signed headers, or a run's ID in the path.
func requestIDs(r *http.Request) []any {
	var attrs []any
	if id := r.PathValue("id"); len(id) > 4 && id[:4] == "run_" {
		attrs = append(attrs, "run_id", id)
	}
	if id := r.Header.Get("Jobplane-Run"); id != "" {
		attrs = append(attrs, "run_id", id)
	}
	if id := r.Header.Get("Jobplane-Attempt"); id != "" {
		attrs = append(attrs, "attempt_id", id)
	}
	if id := r.Header.Get("Jobplane-Runner"); id != "" {
		attrs = append(attrs, "runner_id", id)
	}
	return attrs
}

// statusWriter remembers the status; it keeps Flush, which log following
// (server-sent events) needs.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	err    error
}

// ReportError takes the internal error the API answers 500 for, to log it
// with the request's identifiers; it passes it on to a writer beneath
// that wants it too (the request's trace span).
func (w *statusWriter) ReportError(err error) bool {
	w.err = err
	if r, ok := w.ResponseWriter.(interface{ ReportError(error) bool }); ok {
		r.ReportError(err)
	}
	return true
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	w.wrote = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics: exposition error", "err", v) }
