package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
)

// SchedulesCmd lists the jobs' schedules and their next firings.
type SchedulesCmd struct {
	ClientFlags
}

// Run prints the schedules.
func (c *SchedulesCmd) Run(g *Globals) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	v, err := cl.Schedules(g.Ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(g.Stdout, v)
	}
	printSchedules(g.Stdout, v)
	return nil
}

func printSchedules(w io.Writer, v *protocol.SchedulesView) {
	if len(v.Schedules) == 0 {
		fmt.Fprintln(w, "no schedules")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tCHANNEL\tCRON\tTZ\tCATCH UP\tNEXT FIRE\tLAST WINDOW")
	for _, s := range v.Schedules {
		next := "-"
		if s.Error != "" {
			next = "error: " + s.Error
		} else if s.NextFireAt != nil {
			next = fmtScheduleTime(*s.NextFireAt, s.TZ)
		}
		last := "-"
		if s.LastWindow != nil {
			last = fmtScheduleTime(*s.LastWindow, s.TZ)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Job, s.Channel, s.Cron, s.TZ, s.CatchUp, next, last)
	}
	_ = tw.Flush()
}

// fmtScheduleTime shows a time in UTC, and in the schedule's zone too when
// that is another.
func fmtScheduleTime(t time.Time, tz string) string {
	out := t.UTC().Format("2006-01-02 15:04Z")
	if loc, err := time.LoadLocation(tz); err == nil && tz != "UTC" {
		out += " (" + t.In(loc).Format("15:04 MST") + ")"
	}
	return out
}
