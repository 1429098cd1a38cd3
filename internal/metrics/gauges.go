package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/store"
)

var (
	descRuns = prometheus.NewDesc("jobplane_runs", "Runs by job and state.", []string{"job", "state"}, nil)
	descAtts = prometheus.NewDesc("jobplane_attempts", "Attempts by state.", []string{"state"}, nil)
	descQ    = prometheus.NewDesc("jobplane_queue_depth", "Queued attempts claimable now (due and not waiting for a lease key), by pool.", []string{"pool"}, nil)
	descLW   = prometheus.NewDesc("jobplane_lease_waits", "Queued attempts waiting for a run lease key held by another run.", nil, nil)
	descHB   = prometheus.NewDesc("jobplane_runner_heartbeat_age_seconds", "Seconds since each runner's last signed call.", []string{"runner", "pool", "status"}, nil)
	descSeal = prometheus.NewDesc("jobplane_audit_sealed_seq", "Sequence number of the last sealed audit event.", nil, nil)
	descLast = prometheus.NewDesc("jobplane_audit_latest_seq", "Sequence number of the last committed audit event.", nil, nil)
	descUp   = prometheus.NewDesc("jobplane_store_up", "1 if the scrape could read the database gauges, else 0.", nil, nil)
)

// dbCollector reads the gauges from the database at each scrape.
type dbCollector struct {
	src   GaugeSource
	clock clock.Clock
	log   *slog.Logger
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRuns, descAtts, descQ, descLW, descHB, descSeal, descLast, descUp} {
		ch <- d
	}
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape that waits on a stuck database would pile up; give up and
	// say so in jobplane_store_up instead.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The gauges count every tenant's rows.
	ctx = store.WithSystem(ctx, "metrics")
	g, err := c.src.MetricsGauges(ctx, c.clock.NowOrNil())
	if err != nil {
		c.log.Warn("metrics: read gauges", "err", err)
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	for _, r := range g.Runs {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(r.N), r.Job, r.State)
	}
	for _, a := range g.Attempts {
		ch <- prometheus.MustNewConstMetric(descAtts, prometheus.GaugeValue, float64(a.N), a.State)
	}
	for _, q := range g.QueueDepth {
		ch <- prometheus.MustNewConstMetric(descQ, prometheus.GaugeValue, float64(q.N), q.Pool)
	}
	ch <- prometheus.MustNewConstMetric(descLW, prometheus.GaugeValue, float64(g.LeaseWaits))
	now := c.clock.Now()
	for _, r := range g.Runners {
		if r.LastSeenAt == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descHB, prometheus.GaugeValue, max(now.Sub(*r.LastSeenAt).Seconds(), 0), r.ID, r.Pool, r.Status)
	}
	ch <- prometheus.MustNewConstMetric(descSeal, prometheus.GaugeValue, float64(g.AuditHead))
	ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, float64(g.AuditLatest))
}
