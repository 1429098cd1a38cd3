package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	_ "time/tzdata" // schedule time zones must not depend on the host's zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Schedules (docs/schedules.md): a job's schedule block requests a run on
// its channel at every fire time of its cron expression, as the built-in
// service principal "scheduler". The store keeps, per tenant, channel and
// job, the next fire time; every replica runs a pass every ScheduleInterval
// and claims a due fire time with a conditional update, so that exactly one
// replica requests the window's run. The run's idempotency key names the
// window as well, so the runs table backs "at most one run per job and
// window" too.

// ScheduleInterval is how often each replica runs a scheduler pass.
const ScheduleInterval = 10 * time.Second

// scheduleGrace is how late a fire time may be seen and still count as on
// time for catch_up: none. A pass runs every ScheduleInterval, with jitter,
// so an on-time window is seen up to about one interval late; twice that
// leaves room for a slow pass.
const scheduleGrace = 2 * ScheduleInterval

// SchedulerPrincipal is the built-in service principal scheduled runs are
// requested as; policies must allow it like anyone else.
const SchedulerPrincipal = "scheduler"

// maxCatchUpSteps bounds the walk from a stored fire time to the latest
// missed one (a year of a minutely schedule).
const maxCatchUpSteps = 600_000

// Catch-up modes of a schedule.
const (
	CatchUpLatest = "latest"
	CatchUpNone   = "none"
	CatchUpAll    = "all" // treated as latest
)

// JobSchedule is a job's schedule block as a catalog declares it.
type JobSchedule struct {
	Job     string
	Cron    string
	TZ      string
	Channel string
	Params  json.RawMessage // normalized, defaults applied
	CatchUp string
}

// ScheduleCatalog is implemented by a Catalog whose jobs can carry
// schedules; catalogs without it (test fakes) schedule nothing.
type ScheduleCatalog interface {
	Catalog
	// Schedules lists the jobs that have a schedule, by job name.
	Schedules() []JobSchedule
}

// SchedulesView is the answer of GET /v1/schedules.
type SchedulesView struct {
	Schedules []ScheduleView `json:"schedules"`
}

// ScheduleView is one job's schedule with its next firing.
type ScheduleView struct {
	Job        string     `json:"job"`
	Channel    string     `json:"channel"`
	Cron       string     `json:"cron"`
	TZ         string     `json:"tz"`
	CatchUp    string     `json:"catch_up"`
	NextFireAt *time.Time `json:"next_fire_at"`
	LastWindow *time.Time `json:"last_window"`
	Commit     string     `json:"commit"`
	Error      string     `json:"error,omitempty"`
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compiledSchedule is a parsed expression in its zone.
type compiledSchedule struct {
	sched cron.Schedule
	loc   *time.Location
}

func compileSchedule(js JobSchedule) (*compiledSchedule, error) {
	sched, err := cronParser.Parse(js.Cron)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w", js.Cron, err)
	}
	tz := js.TZ
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: %w", tz, err)
	}
	return &compiledSchedule{sched: sched, loc: loc}, nil
}

// next is the first fire time strictly after t, in UTC; zero when the
// expression never fires again (robfig gives up after five years).
func (c *compiledSchedule) next(t time.Time) time.Time {
	n := c.sched.Next(t.In(c.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC().Truncate(time.Microsecond)
}

// latest walks from a due fire time to the latest fire time <= now.
func (c *compiledSchedule) latest(due, now time.Time) time.Time {
	w := due
	for range maxCatchUpSteps {
		n := c.next(w)
		if n.IsZero() || n.After(now) {
			break
		}
		w = n
	}
	return w
}

// scheduledChannels resolves every fixed channel (pattern channels have no
// single branch to schedule from) and returns, per channel, its catalog's
// schedules that name that channel. Channels that cannot be resolved are
// left out of ok.
func (s *Service) scheduledChannels(ctx context.Context) (cats map[string]ScheduleCatalog, scheds map[string][]JobSchedule) {
	cats, scheds = map[string]ScheduleCatalog{}, map[string][]JobSchedule{}
	cs, ok := s.defs.(CatalogSource)
	if !ok {
		return cats, scheds
	}
	for _, ch := range slices.Sorted(maps.Keys(cs.Channels())) {
		if cs.IsPattern(ch) {
			continue
		}
		cat, err := s.defs.Resolve(ctx, ch, "")
		if err != nil {
			s.log.DebugContext(ctx, "control: schedules of channel not read", "channel", ch, "err", err)
			continue
		}
		sc, ok := cat.(ScheduleCatalog)
		if !ok {
			continue
		}
		cats[ch] = sc
		for _, js := range sc.Schedules() {
			if js.Channel == ch {
				scheds[ch] = append(scheds[ch], js)
			}
		}
	}
	return cats, scheds
}

// FireSchedules runs one scheduler pass: for every fixed channel's active
// catalog, and every active installation tenant's .jobplane catalog
// (tenant_schedules.go), and every job whose schedule names that channel, it records the
// first fire time after now on first sight, and when a fire time is due
// claims it and requests the window's run as "scheduler". It returns the
// number of windows this replica fired (denied runs included). Every
// replica calls it every ScheduleInterval; tests call it with a fake clock.
func (s *Service) FireSchedules(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "scheduler") // cross-tenant by nature (docs/operations.md)
	fired, err := s.fireServerSchedules(ctx)
	n, terr := s.fireTenantSchedules(ctx)
	return fired + n, errors.Join(err, terr)
}

// fireServerSchedules fires the schedules of the server's definitions, in
// the default tenant.
func (s *Service) fireServerSchedules(ctx context.Context) (int, error) {
	if s.defs == nil {
		return 0, nil
	}
	t, err := s.store.TenantEnsure(ctx, catalogTenant, s.clock.NowOrNil())
	if err != nil {
		return 0, store.Refusal(err)
	}
	cats, scheds := s.scheduledChannels(ctx)
	fired := 0
	var errs []error
	seen := map[[2]string]bool{}
	for _, ch := range slices.Sorted(maps.Keys(cats)) {
		for _, js := range scheds[ch] {
			seen[[2]string{ch, js.Job}] = true
			ok, err := s.fireSchedule(ctx, t.ID, cats[ch], js)
			if err != nil {
				errs = append(errs, fmt.Errorf("schedule of %s on %s: %w", js.Job, ch, err))
			}
			if ok {
				fired++
			}
		}
	}
	// Forget schedules the catalogs of readable channels no longer declare,
	// so that one put back later starts afresh rather than catching up.
	rows, err := s.store.ScheduleList(ctx, t.ID)
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range rows {
		if _, read := cats[r.Channel]; read && !seen[[2]string{r.Channel, r.Job}] {
			if err := s.store.ScheduleDelete(ctx, t.ID, r.Channel, r.Job); err != nil && !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, err)
			}
		}
	}
	return fired, errors.Join(errs...)
}

// fireSchedule handles one job's schedule; fired reports whether this
// replica claimed a window and requested its run.
func (s *Service) fireSchedule(ctx context.Context, tenant string, cat ScheduleCatalog, js JobSchedule) (fired bool, err error) {
	c, err := compileSchedule(js)
	if err != nil {
		return false, err
	}
	now := s.clock.Now().UTC()
	st, err := s.store.ScheduleGet(ctx, tenant, js.Channel, js.Job)
	if errors.Is(err, store.ErrNotFound) {
		// First sight: the first fire time after now, never retroactively.
		next := c.next(now)
		if next.IsZero() {
			return false, fmt.Errorf("cron %q never fires after %s", js.Cron, now.Format(time.RFC3339))
		}
		err := s.store.ScheduleInsert(ctx, &store.Schedule{Tenant: tenant, Channel: js.Channel, Job: js.Job, Cron: js.Cron, TZ: js.TZ,
			Commit: cat.Commit(), NextFireAt: next, UpdatedAt: s.nowValue()})
		if errors.Is(err, store.ErrAlreadyExists) {
			return false, nil // another replica saw it first
		}
		return false, store.Refusal(err)
	}
	if err != nil {
		return false, store.Refusal(err)
	}
	if st.Cron != js.Cron || st.TZ != js.TZ {
		// A changed expression or zone starts afresh, like a first sight.
		adv := *st
		adv.Cron, adv.TZ, adv.Commit, adv.NextFireAt, adv.UpdatedAt = js.Cron, js.TZ, cat.Commit(), c.next(now), s.nowValue()
		if adv.NextFireAt.IsZero() {
			return false, fmt.Errorf("cron %q never fires after %s", js.Cron, now.Format(time.RFC3339))
		}
		if err := s.store.ScheduleAdvance(ctx, &adv, st.NextFireAt); err != nil && !errors.Is(err, store.ErrNotFound) {
			return false, store.Refusal(err)
		}
		return false, nil
	}
	if st.NextFireAt.After(now) {
		return false, nil
	}
	// Due. Older missed windows are skipped: only the latest <= now may run.
	window := c.latest(st.NextFireAt, now)
	next := c.next(now)
	if next.IsZero() {
		// Never again: park it far ahead so that it is not claimed twice.
		next = now.AddDate(100, 0, 0)
	}
	fire := js.CatchUp != CatchUpNone || now.Sub(window) <= scheduleGrace
	adv := *st
	adv.Commit, adv.NextFireAt, adv.UpdatedAt = cat.Commit(), next, s.nowValue()
	if fire {
		adv.LastWindow = &window
	}
	if err := s.store.ScheduleAdvance(ctx, &adv, st.NextFireAt); errors.Is(err, store.ErrNotFound) {
		return false, nil // another replica claimed this fire time
	} else if err != nil {
		return false, store.Refusal(err)
	}
	if !fire {
		s.log.InfoContext(ctx, "control: missed schedule window skipped (catch_up: none)", "job", js.Job, "channel", js.Channel,
			"window", window.Format(time.RFC3339), "next", next.Format(time.RFC3339))
		return false, nil
	}
	err = s.requestScheduled(ctx, tenant, cat, js, window)
	var denied *DeniedError
	switch {
	case err == nil, errors.As(err, &denied):
		return true, nil
	case transient(err):
		// Give the window back so that the next pass retries it; the
		// idempotency key makes a retry after an unknown commit harmless.
		back := adv
		back.NextFireAt, back.LastWindow, back.UpdatedAt = window, st.LastWindow, s.nowValue()
		if berr := s.store.ScheduleAdvance(ctx, &back, next); berr != nil && !errors.Is(berr, store.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("give back window: %w", berr))
		}
		return false, err
	default:
		// A refusal (a lease conflict, say) is final for this window.
		return true, fmt.Errorf("window %s: %w", window.Format(time.RFC3339), err)
	}
}

// transient reports whether a failed run request may succeed if repeated.
func transient(err error) bool {
	return errors.Is(err, protocol.ErrRetry) || errors.Is(err, protocol.ErrUnavailable) ||
		errors.Is(err, protocol.ErrCatalogUnavailable) || errors.Is(err, store.ErrCommitUnknown) ||
		errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ScheduleIdempotencyKey is the idempotency key of a window's run: one run
// per channel, job and window.
func ScheduleIdempotencyKey(channel, job string, window time.Time) string {
	return "schedule:" + channel + ":" + job + ":" + window.UTC().Format(time.RFC3339)
}

// requestScheduled requests the run of one window as "scheduler", the way
// an API request does, with the fire time as the window of its lease keys.
// The run is requested from the catalog the pass read, so that it runs
// the commit the schedule was seen in.
func (s *Service) requestScheduled(ctx context.Context, tenant string, cat Catalog, js JobSchedule, window time.Time) error {
	actor := principal.Actor{TenantID: tenant, Name: SchedulerPrincipal, Kind: "service"}
	w := window.UTC().Format(time.RFC3339)
	req := &protocol.RunRequest{
		Job: js.Job, Channel: js.Channel, Params: js.Params,
		IdempotencyKey: ScheduleIdempotencyKey(js.Channel, js.Job, window),
		Reason:         fmt.Sprintf("schedule %q (%s), window %s", js.Cron, js.TZ, w),
	}
	v, created, err := s.requestRun(ctx, actor, req, requestOrigin{Window: window, Catalog: cat,
		Source: map[string]any{"kind": "schedule", "window": w, "cron": js.Cron, "tz": js.TZ}})
	if err != nil {
		s.log.InfoContext(ctx, "control: scheduled run not queued", "job", js.Job, "channel", js.Channel, "window", w, "err", err)
		return err
	}
	s.log.InfoContext(ctx, "control: scheduled run requested", "job", js.Job, "channel", js.Channel, "window", w,
		"run_id", v.Run.ID, "state", v.Run.State, "created", created)
	return nil
}

// ListSchedules lists every schedule of the channels' active catalogs with
// its next firing and the last window fired. A schedule not seen by a
// scheduler pass yet shows the first fire time after now.
//
// The schedules are the caller's tenant's: an installation tenant sees
// those of its .jobplane repository (none without one), every other tenant
// those of the server's definitions.
func (s *Service) ListSchedules(ctx context.Context, actor principal.Actor) (*SchedulesView, error) {
	in, err := s.store.GitHubInstallationGetByTenant(ctx, actor.TenantID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, store.Refusal(err)
	}
	if in == nil && s.defs == nil {
		return nil, fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable)
	}
	rows, err := s.store.ScheduleList(ctx, actor.TenantID)
	if err != nil {
		return nil, store.Refusal(err)
	}
	state := map[[2]string]*store.Schedule{}
	for _, r := range rows {
		state[[2]string{r.Channel, r.Job}] = r
	}
	if in != nil {
		return s.listTenantSchedules(ctx, in, state)
	}
	out := &SchedulesView{Schedules: []ScheduleView{}}
	cats, scheds := s.scheduledChannels(ctx)
	for _, ch := range slices.Sorted(maps.Keys(cats)) {
		for _, js := range scheds[ch] {
			out.Schedules = append(out.Schedules, s.scheduleView(js, cats[ch].Commit(), state))
		}
	}
	return out, nil
}

// scheduleView is one schedule with its stored state, or the first fire
// time after now when no pass has seen it yet.
func (s *Service) scheduleView(js JobSchedule, commit string, state map[[2]string]*store.Schedule) ScheduleView {
	now := s.clock.Now().UTC()
	v := ScheduleView{Job: js.Job, Channel: js.Channel, Cron: js.Cron, TZ: js.TZ, CatchUp: js.CatchUp, Commit: commit}
	if st := state[[2]string{js.Channel, js.Job}]; st != nil && st.Cron == js.Cron && st.TZ == js.TZ {
		v.NextFireAt, v.LastWindow = ptr(st.NextFireAt), st.LastWindow
	} else if c, err := compileSchedule(js); err != nil {
		v.Error = err.Error()
	} else if n := c.next(now); !n.IsZero() {
		v.NextFireAt = &n
		if st != nil {
			v.LastWindow = st.LastWindow
		}
	}
	return v
}
