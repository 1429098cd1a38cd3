package schedule

import (
	"encoding/json"
	"fmt"
	"time"
	_ "time/tzdata" // schedule time zones must not depend on the host's zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/jobplane/jobplane/internal/control"
)

// Interval is how often each replica runs a scheduler pass.
const Interval = 10 * time.Second

// scheduleGrace is how late a fire time may be seen and still count as on
// time for catch_up: none. A pass runs every Interval, with jitter,
// so an on-time window is seen up to about one interval late; twice that
// leaves room for a slow pass.
const scheduleGrace = 2 * Interval

// Principal is the built-in service principal scheduled runs are
// requested as; policies must allow it like anyone else.
const Principal = "scheduler"

// maxCatchUpSteps bounds the walk from a stored fire time to the latest
// missed one (a year of a minutely schedule).
const maxCatchUpSteps = 600_000

// Catch-up modes of a schedule.
const (
	CatchUpLatest = "latest"
	CatchUpNone   = "none"
	CatchUpAll    = "all" // treated as latest
)

// Job is a job's schedule block as a catalog declares it.
type Job struct {
	Job     string
	Cron    string
	TZ      string
	Channel string
	Params  json.RawMessage // normalized, defaults applied
	CatchUp string
}

// Catalog is implemented by a control.Catalog whose jobs can carry
// schedules; catalogs without it (test fakes) schedule nothing.
type Catalog interface {
	control.Catalog
	// Schedules lists the jobs that have a schedule, by job name.
	Schedules() []Job
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compiledSchedule is a parsed expression in its zone.
type compiledSchedule struct {
	sched cron.Schedule
	loc   *time.Location
}

func compile(js Job) (*compiledSchedule, error) {
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
