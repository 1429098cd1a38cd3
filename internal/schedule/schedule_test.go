package schedule_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/schedule"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// Scheduler tests: a real definitions repository, real stores and a fake
// clock; passes are driven with Fire.

const allowScheduler = `rules:
  - id: scheduled
    jobs: ["*"]
    users: [scheduler]
`

func scheduleFiles(schedule, policy string) map[string]string {
	return map[string]string{
		"jobs/hourly.yaml": `name: hourly
description: Scheduled
params:
  type: object
  additionalProperties: false
  properties:
    account: {type: string, default: "0", pattern: "^[0-9]+$"}
run:
  command: ["true"]
leases:
  - key: "hourly:{params.account}:{window.date}:{window.hour}"
schedule: ` + schedule + `
`,
		"groups.yaml":        "groups: {}\n",
		"policies/main.yaml": policy,
	}
}

type schedEnv struct {
	t      *testing.T
	st     store.Store
	clock  *clock.Fake
	repo   string
	svc    *control.Service
	sched  *schedule.Service
	tenant string
}

func newSchedEnv(t *testing.T, st store.Store, files map[string]string, start time.Time) *schedEnv {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", files, "init")
	require.NoError(t, err)
	e := &schedEnv{t: t, st: st, clock: clock.NewFake(start), repo: repo}
	e.svc, e.sched = e.service()
	tn, err := st.TenantEnsure(context.Background(), "default", e.clock.NowOrNil())
	require.NoError(t, err)
	e.tenant = tn.ID
	return e
}

// service is another replica over the same store, repository and clock:
// its run service and its scheduler.
func (e *schedEnv) service() (*control.Service, *schedule.Service) {
	e.t.Helper()
	defs, err := server.OpenDefinitions(e.repo, map[string]string{"prod": "main"})
	require.NoError(e.t, err)
	svc, err := control.New(control.Config{Store: e.st, Clock: e.clock, Definitions: defs})
	require.NoError(e.t, err)
	return svc, schedule.New(schedule.Config{Store: e.st, Clock: e.clock, Runs: svc, Definitions: defs})
}

func (e *schedEnv) fire(want int) {
	e.t.Helper()
	n, err := e.sched.Fire(context.Background())
	require.NoError(e.t, err)
	require.Equal(e.t, want, n, "windows fired at %s", e.clock.Now())
}

func (e *schedEnv) runs() []*control.RunView {
	e.t.Helper()
	runs, _, err := e.svc.ListRuns(context.Background(), principal.Actor{TenantID: e.tenant}, store.RunListParams{Job: "hourly", Limit: 100})
	require.NoError(e.t, err)
	return runs
}

func (e *schedEnv) state() *store.Schedule {
	e.t.Helper()
	s, err := e.st.ScheduleGet(context.Background(), e.tenant, "prod", "hourly")
	require.NoError(e.t, err)
	return s
}

func at(h, m, s int) time.Time { return time.Date(2026, 11, 1, h, m, s, 0, time.UTC) }

func sourceOf(t *testing.T, r *store.Run) map[string]string {
	t.Helper()
	var src map[string]string
	require.NoError(t, json.Unmarshal(r.Source, &src))
	return src
}

func TestScheduleFiresOnceAtCronTime(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newSchedEnv(t, st, scheduleFiles(`{cron: "0 * * * *", tz: UTC, channel: prod, params: {account: "7"}}`, allowScheduler), at(12, 10, 0))
		e.fire(0)
		require.Empty(t, e.runs(), "first sight never fires retroactively")
		require.Equal(t, at(13, 0, 0), e.state().NextFireAt)
		require.Nil(t, e.state().LastWindow)

		e.clock.Set(at(12, 59, 59))
		e.fire(0)
		e.clock.Set(at(13, 0, 4))
		e.fire(1)
		e.fire(0)
		runs := e.runs()
		require.Len(t, runs, 1)
		r := runs[0].Run
		require.Equal(t, store.RunQueued, r.State)
		require.Equal(t, schedule.Principal, r.Actor)
		require.Equal(t, "schedule:prod:hourly:2026-11-01T13:00:00Z", r.IdempotencyKey)
		require.JSONEq(t, `{"account":"7"}`, string(r.Params))
		src := sourceOf(t, r)
		require.Equal(t, "schedule", src["kind"])
		require.Equal(t, "2026-11-01T13:00:00Z", src["window"])
		var keys []store.LeaseKey
		require.NoError(t, json.Unmarshal(r.LeaseKeys, &keys))
		require.Len(t, keys, 1)
		require.Equal(t, "hourly:7:2026-11-01:13", keys[0].Key, "the window is the fire time, not the time of the pass")
		s := e.state()
		require.Equal(t, at(14, 0, 0), s.NextFireAt)
		require.NotNil(t, s.LastWindow)
		require.Equal(t, at(13, 0, 0), *s.LastWindow)

		// The listing shows the next firing.
		v, err := e.sched.List(context.Background(), principal.Actor{TenantID: e.tenant})
		require.NoError(t, err)
		require.Len(t, v.Schedules, 1)
		require.Equal(t, "hourly", v.Schedules[0].Job)
		require.Equal(t, "latest", v.Schedules[0].CatchUp)
		require.Equal(t, at(14, 0, 0), *v.Schedules[0].NextFireAt)
		require.Equal(t, at(13, 0, 0), *v.Schedules[0].LastWindow)
	})
}

func TestScheduleReplicasFireOncePerWindow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newSchedEnv(t, st, scheduleFiles(`{cron: "0 * * * *", tz: UTC, channel: prod}`, allowScheduler), at(12, 10, 0))
		_, second := e.service()
		_, third := e.service()
		replicas := []*schedule.Service{e.sched, second, third}
		e.fire(0)
		for h := 13; h <= 15; h++ {
			e.clock.Set(at(h, 0, 1))
			var wg sync.WaitGroup
			var mu sync.Mutex
			total := 0
			for _, svc := range replicas {
				for range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						n, err := svc.Fire(context.Background())
						if err != nil {
							t.Errorf("pass: %v", err)
						}
						mu.Lock()
						total += n
						mu.Unlock()
					}()
				}
			}
			wg.Wait()
			require.Equal(t, 1, total, "exactly one replica fires the %02d:00 window", h)
		}
		runs := e.runs()
		require.Len(t, runs, 3)
		seen := map[string]bool{}
		for _, r := range runs {
			seen[sourceOf(t, r.Run)["window"]] = true
		}
		require.Len(t, seen, 3, "one run per window")
	})
}

func TestScheduleCatchUpLatestAfterDowntime(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newSchedEnv(t, st, scheduleFiles(`{cron: "0 * * * *", tz: UTC, channel: prod, catch_up: latest}`, allowScheduler), at(12, 10, 0))
		e.fire(0)
		// Down from 12:10 to 16:20: the 13:00, 14:00, 15:00 and 16:00 windows were missed.
		e.clock.Set(at(16, 20, 0))
		e.fire(1)
		e.fire(0)
		runs := e.runs()
		require.Len(t, runs, 1, "only the latest missed window runs")
		require.Equal(t, "2026-11-01T16:00:00Z", sourceOf(t, runs[0].Run)["window"])
		require.Equal(t, at(17, 0, 0), e.state().NextFireAt)
		e.clock.Set(at(17, 0, 2))
		e.fire(1)
		require.Len(t, e.runs(), 2)
	})
}

func TestScheduleCatchUpNone(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newSchedEnv(t, st, scheduleFiles(`{cron: "0 * * * *", tz: UTC, channel: prod, catch_up: none}`, allowScheduler), at(12, 10, 0))
		e.fire(0)
		e.clock.Set(at(15, 20, 0))
		e.fire(0)
		require.Empty(t, e.runs(), "missed windows are skipped")
		s := e.state()
		require.Equal(t, at(16, 0, 0), s.NextFireAt)
		require.Nil(t, s.LastWindow)
		e.clock.Set(at(16, 0, 9))
		e.fire(1)
		runs := e.runs()
		require.Len(t, runs, 1, "the next on-time window runs")
		require.Equal(t, "2026-11-01T16:00:00Z", sourceOf(t, runs[0].Run)["window"])
	})
}

func TestScheduleDeniedByPolicy(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		policy := `rules:
  - id: people-only
    jobs: ["*"]
    users: [alice]
`
		e := newSchedEnv(t, st, scheduleFiles(`{cron: "0 * * * *", tz: UTC, channel: prod}`, policy), at(12, 10, 0))
		e.fire(0)
		e.clock.Set(at(13, 0, 0))
		e.fire(1)
		runs := e.runs()
		require.Len(t, runs, 1, "a denied scheduled run is kept")
		require.Equal(t, store.RunDenied, runs[0].Run.State)
		require.Equal(t, schedule.Principal, runs[0].Run.Actor)
		e.fire(0)
		require.Equal(t, at(14, 0, 0), e.state().NextFireAt, "the window is spent")
	})
}

func TestScheduleDSTSpringForwardSkips0230(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		// 2027-03-28: Paris clocks jump from 02:00 CET to 03:00 CEST.
		start := time.Date(2027, 3, 27, 12, 0, 0, 0, time.UTC)
		e := newSchedEnv(t, st, scheduleFiles(`{cron: "30 2 * * *", tz: Europe/Paris, channel: prod}`, allowScheduler), start)
		e.fire(0)
		require.Equal(t, time.Date(2027, 3, 29, 0, 30, 0, 0, time.UTC), e.state().NextFireAt,
			"there is no 02:30 in Paris on the 28th: the next firing is on the 29th at 02:30 CEST")
		e.clock.Set(time.Date(2027, 3, 28, 1, 30, 0, 0, time.UTC)) // 03:30 CEST on the 28th
		e.fire(0)
		e.clock.Set(time.Date(2027, 3, 29, 0, 30, 5, 0, time.UTC))
		e.fire(1)
		runs := e.runs()
		require.Len(t, runs, 1)
		require.Equal(t, "2027-03-29T00:30:00Z", sourceOf(t, runs[0].Run)["window"], "windows are UTC instants")
		require.True(t, strings.HasSuffix(runs[0].Run.IdempotencyKey, ":2027-03-29T00:30:00Z"))
	})
}
