package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Runs is the run service's entry point for run requests (a
// *control.Service): the one the API's requests take.
type Runs interface {
	RequestRunFrom(ctx context.Context, actor principal.Actor, req *protocol.RunRequest, o control.RequestOrigin) (*control.RunView, bool, error)
}

// Tenants is an integration whose installations are tenants with
// definitions of their own (the GitHub App).
type Tenants interface {
	// TenantSchedules are the schedules of one tenant's own definitions;
	// nil when the tenant sees the server's.
	TenantSchedules(ctx context.Context, tenant string) (*Tenant, error)
	// ScheduledTenants are the schedules of every active tenant whose
	// definitions could be read.
	ScheduledTenants(ctx context.Context) ([]*Tenant, error)
}

// Tenant is the schedules of a tenant's own definitions.
type Tenant struct {
	Tenant string
	// Channel is the only channel the tenant's definitions are served on:
	// schedules naming another have no catalog to run in.
	Channel string
	// Catalog declares the schedules; nil when the tenant has none
	// (no definitions of its own, or an installation that is not active).
	Catalog Catalog
}

// Config configures the Service.
type Config struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Runs requests the windows' runs.
	Runs Runs
	// Definitions are the server's definitions (nil: none).
	Definitions control.Definitions
	// Tenants serves installation tenants' schedules (nil: none).
	Tenants Tenants
}

// Service fires and lists schedules.
type Service struct {
	store   store.Store
	clock   clock.Clock
	log     *slog.Logger
	runs    Runs
	defs    control.Definitions
	tenants Tenants
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, runs: cfg.Runs, defs: cfg.Definitions, tenants: cfg.Tenants}
}

// scheduledChannels resolves every fixed channel (pattern channels have no
// single branch to schedule from) and returns, per channel, its catalog's
// schedules that name that channel. Channels that cannot be resolved are
// left out of ok.
func (s *Service) scheduledChannels(ctx context.Context) (cats map[string]Catalog, scheds map[string][]Job) {
	cats, scheds = map[string]Catalog{}, map[string][]Job{}
	cs, ok := s.defs.(control.CatalogSource)
	if !ok {
		return cats, scheds
	}
	for _, ch := range slices.Sorted(maps.Keys(cs.Channels())) {
		if cs.IsPattern(ch) {
			continue
		}
		cat, err := s.defs.Resolve(ctx, ch, "")
		if err != nil {
			s.log.DebugContext(ctx, "schedule: schedules of channel not read", "channel", ch, "err", err)
			continue
		}
		sc, ok := cat.(Catalog)
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

// Fire runs one scheduler pass: for every fixed channel's active
// catalog, and every active installation tenant's own catalog
// (Tenants.ScheduledTenants), and every job whose schedule names that channel, it records the
// first fire time after now on first sight, and when a fire time is due
// claims it and requests the window's run as "scheduler". It returns the
// number of windows this replica fired (denied runs included). Every
// replica calls it every Interval; tests call it with a fake clock.
func (s *Service) Fire(ctx context.Context) (int, error) {
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
	t, err := s.store.TenantEnsure(ctx, principal.DefaultTenant, s.clock.NowOrNil())
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
func (s *Service) fireSchedule(ctx context.Context, tenant string, cat Catalog, js Job) (fired bool, err error) {
	c, err := compile(js)
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
			Commit: cat.Commit(), NextFireAt: next, UpdatedAt: clock.NowOrZero(s.clock)})
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
		adv.Cron, adv.TZ, adv.Commit, adv.NextFireAt, adv.UpdatedAt = js.Cron, js.TZ, cat.Commit(), c.next(now), clock.NowOrZero(s.clock)
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
	adv.Commit, adv.NextFireAt, adv.UpdatedAt = cat.Commit(), next, clock.NowOrZero(s.clock)
	if fire {
		adv.LastWindow = &window
	}
	if err := s.store.ScheduleAdvance(ctx, &adv, st.NextFireAt); errors.Is(err, store.ErrNotFound) {
		return false, nil // another replica claimed this fire time
	} else if err != nil {
		return false, store.Refusal(err)
	}
	if !fire {
		s.log.InfoContext(ctx, "schedule: missed window skipped (catch_up: none)", "job", js.Job, "channel", js.Channel,
			"window", window.Format(time.RFC3339), "next", next.Format(time.RFC3339))
		return false, nil
	}
	err = s.requestScheduled(ctx, tenant, cat, js, window)
	var denied *control.DeniedError
	switch {
	case err == nil, errors.As(err, &denied):
		return true, nil
	case transient(err):
		// Give the window back so that the next pass retries it; the
		// idempotency key makes a retry after an unknown commit harmless.
		back := adv
		back.NextFireAt, back.LastWindow, back.UpdatedAt = window, st.LastWindow, clock.NowOrZero(s.clock)
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

// IdempotencyKey is the idempotency key of a window's run: one run per
// channel, job and window.
func IdempotencyKey(channel, job string, window time.Time) string {
	return "schedule:" + channel + ":" + job + ":" + window.UTC().Format(time.RFC3339)
}

// requestScheduled requests the run of one window as "scheduler", the way
// an API request does, with the fire time as the window of its lease keys.
// The run is requested from the catalog the pass read, so that it runs
// the commit the schedule was seen in.
func (s *Service) requestScheduled(ctx context.Context, tenant string, cat Catalog, js Job, window time.Time) error {
	actor := principal.Actor{TenantID: tenant, Name: Principal, Kind: "service"}
	w := window.UTC().Format(time.RFC3339)
	req := &protocol.RunRequest{
		Job: js.Job, Channel: js.Channel, Params: js.Params,
		IdempotencyKey: IdempotencyKey(js.Channel, js.Job, window),
		Reason:         fmt.Sprintf("schedule %q (%s), window %s", js.Cron, js.TZ, w),
	}
	v, created, err := s.runs.RequestRunFrom(ctx, actor, req, control.RequestOrigin{Window: window, Catalog: cat,
		Source: map[string]any{"kind": "schedule", "window": w, "cron": js.Cron, "tz": js.TZ}})
	if err != nil {
		s.log.InfoContext(ctx, "schedule: scheduled run not queued", "job", js.Job, "channel", js.Channel, "window", w, "err", err)
		return err
	}
	s.log.InfoContext(ctx, "schedule: scheduled run requested", "job", js.Job, "channel", js.Channel, "window", w,
		"run_id", v.Run.ID, "state", v.Run.State, "created", created)
	return nil
}

// List lists every schedule of the channels' active catalogs with
// its next firing and the last window fired. A schedule not seen by a
// scheduler pass yet shows the first fire time after now.
//
// The schedules are the caller's tenant's: an installation tenant sees
// those of its .jobplane repository (none without one), every other tenant
// those of the server's definitions.
func (s *Service) List(ctx context.Context, actor principal.Actor) (*protocol.SchedulesView, error) {
	var own *Tenant
	if s.tenants != nil {
		var err error
		if own, err = s.tenants.TenantSchedules(ctx, actor.TenantID); err != nil {
			return nil, err
		}
	}
	if own == nil && s.defs == nil {
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
	out := &protocol.SchedulesView{Schedules: []protocol.ScheduleView{}}
	if own != nil {
		if own.Catalog != nil {
			for _, js := range own.schedules() {
				out.Schedules = append(out.Schedules, s.view(js, own.Catalog.Commit(), state))
			}
		}
		return out, nil
	}
	cats, scheds := s.scheduledChannels(ctx)
	for _, ch := range slices.Sorted(maps.Keys(cats)) {
		for _, js := range scheds[ch] {
			out.Schedules = append(out.Schedules, s.view(js, cats[ch].Commit(), state))
		}
	}
	return out, nil
}

// scheduleView is one schedule with its stored state, or the first fire
// time after now when no pass has seen it yet.
func (s *Service) view(js Job, commit string, state map[[2]string]*store.Schedule) protocol.ScheduleView {
	now := s.clock.Now().UTC()
	v := protocol.ScheduleView{Job: js.Job, Channel: js.Channel, Cron: js.Cron, TZ: js.TZ, CatchUp: js.CatchUp, Commit: commit}
	if st := state[[2]string{js.Channel, js.Job}]; st != nil && st.Cron == js.Cron && st.TZ == js.TZ {
		next := st.NextFireAt
		v.NextFireAt, v.LastWindow = &next, st.LastWindow
	} else if c, err := compile(js); err != nil {
		v.Error = err.Error()
	} else if n := c.next(now); !n.IsZero() {
		v.NextFireAt = &n
		if st != nil {
			v.LastWindow = st.LastWindow
		}
	}
	return v
}

// schedules are the tenant catalog's schedules on its channel; a schedule
// naming another channel has no catalog to run in.
func (ts *Tenant) schedules() []Job {
	var out []Job
	for _, js := range ts.Catalog.Schedules() {
		if js.Channel == ts.Channel {
			out = append(out, js)
		}
	}
	return out
}

// fireTenantSchedules runs the scheduler pass of every tenant whose own
// definitions the integration read. The firing state is the same
// per-tenant table as the server's schedules, so the same conditional
// update makes one replica of many fire each window.
func (s *Service) fireTenantSchedules(ctx context.Context) (int, error) {
	if s.tenants == nil {
		return 0, nil
	}
	tss, err := s.tenants.ScheduledTenants(ctx)
	if err != nil {
		return 0, err
	}
	fired := 0
	var errs []error
	for _, ts := range tss {
		var scheds []Job
		if ts.Catalog != nil {
			scheds = ts.schedules()
		}
		seen := map[string]bool{}
		for _, js := range scheds {
			seen[js.Job] = true
			ok, err := s.fireSchedule(ctx, ts.Tenant, ts.Catalog, js)
			if err != nil {
				errs = append(errs, fmt.Errorf("schedule of %s in %s: %w", js.Job, ts.Tenant, err))
			}
			if ok {
				fired++
			}
		}
		// Forget what the tenant's definitions no longer declare (or all,
		// without definitions of its own), as for the server's.
		rows, err := s.store.ScheduleList(ctx, ts.Tenant)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range rows {
			if r.Channel != ts.Channel || !seen[r.Job] {
				if err := s.store.ScheduleDelete(ctx, ts.Tenant, r.Channel, r.Job); err != nil && !errors.Is(err, store.ErrNotFound) {
					errs = append(errs, err)
				}
			}
		}
	}
	return fired, errors.Join(errs...)
}
