package policy

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // validation must not depend on the host having a zoneinfo database
)

var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// window is a compiled Hours: minutes since local midnight and a weekday mask.
type window struct {
	loc      *time.Location
	from, to int     // minutes of the day; to may be 1440 (24:00)
	days     [7]bool // indexed by time.Weekday
	label    string  // "mon,tue 01:00-05:00 Europe/Paris", for traces
}

// compileHours validates h. Problems name the sub-field ("hours.tz").
//
// The zone is loaded with time.LoadLocation here, at validation: it reads only
// the zoneinfo database (embedded via time/tzdata when the host has none), and
// loading it once keeps Decide free of lookups and failures.
func compileHours(h *Hours) (*window, []Problem) {
	var probs []Problem
	w := &window{}
	var err error
	switch {
	case h.TZ == "":
		probs = append(probs, Problem{Field: "hours.tz", Message: "is required (an IANA zone like UTC or Europe/Paris)"})
	case strings.EqualFold(h.TZ, "local"):
		// "Local" is the server's zone: a decision would depend on the host.
		probs = append(probs, Problem{Field: "hours.tz", Message: "must be an IANA zone name, not Local"})
	default:
		if w.loc, err = time.LoadLocation(h.TZ); err != nil {
			probs = append(probs, Problem{Field: "hours.tz", Message: fmt.Sprintf("unknown time zone %q", h.TZ)})
		}
	}
	var okFrom, okTo bool
	if w.from, okFrom = clockMinutes(h.From, false); !okFrom {
		probs = append(probs, Problem{Field: "hours.from", Message: fmt.Sprintf("must be a time HH:MM from 00:00 to 23:59, got %q", h.From)})
	}
	if w.to, okTo = clockMinutes(h.To, true); !okTo {
		probs = append(probs, Problem{Field: "hours.to", Message: fmt.Sprintf("must be a time HH:MM from 00:00 to 24:00, got %q", h.To)})
	}
	if okFrom && okTo && w.from == w.to {
		probs = append(probs, Problem{Field: "hours.to", Message: "must differ from hours.from (use from: \"00:00\", to: \"24:00\" for a whole day)"})
	}
	if len(h.Days) == 0 {
		w.days = [7]bool{true, true, true, true, true, true, true}
	}
	for i, d := range h.Days {
		found := false
		for wd, name := range dayNames {
			if strings.EqualFold(d, name) {
				w.days[wd], found = true, true
			}
		}
		if !found {
			probs = append(probs, Problem{Field: fmt.Sprintf("hours.days[%d]", i), Message: fmt.Sprintf("must be one of mon, tue, wed, thu, fri, sat, sun, got %q", d)})
		}
	}
	if len(probs) > 0 {
		return nil, probs
	}
	days := "every day"
	if len(h.Days) > 0 {
		days = strings.ToLower(strings.Join(h.Days, ","))
	}
	w.label = fmt.Sprintf("%s %s-%s %s", days, h.From, h.To, h.TZ)
	return w, nil
}

// clockMinutes parses HH:MM; 24:00 only when allowed (an exclusive end).
func clockMinutes(s string, allow24 bool) (int, bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, false
	}
	for _, i := range []int{0, 1, 3, 4} {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	h := int(s[0]-'0')*10 + int(s[1]-'0')
	m := int(s[3]-'0')*10 + int(s[4]-'0')
	if m > 59 || h > 24 || (h == 24 && (m != 0 || !allow24)) {
		return 0, false
	}
	return h*60 + m, true
}

// contains reports whether now falls in the window. Times are taken in the
// window's zone at minute resolution: from is inclusive, to exclusive. A
// window with from > to wraps past midnight and belongs to the day it
// started: "fri 22:00-02:00" includes Saturday 01:00 but not Friday 01:00.
func (w *window) contains(now time.Time) bool {
	local := now.In(w.loc)
	m := local.Hour()*60 + local.Minute()
	wd := local.Weekday()
	if w.from < w.to {
		return w.days[wd] && m >= w.from && m < w.to
	}
	if m >= w.from {
		return w.days[wd]
	}
	return m < w.to && w.days[(wd+6)%7]
}
