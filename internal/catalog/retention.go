package catalog

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Bounds of a retention period.
const (
	// MinRetention keeps a sweep from deleting what a person is still
	// looking at right after a run ends.
	MinRetention = time.Hour
	// MaxRetention is ten years; longer is "keep" (no retention set).
	MaxRetention = 3650 * 24 * time.Hour
)

// Retention says how long the logs and artifacts of an ended run are kept
// (zero: the server's default). The run record and its audit events are
// kept regardless.
type Retention struct {
	Logs      time.Duration `json:"logs,omitempty"`
	Artifacts time.Duration `json:"artifacts,omitempty"`
}

// MarshalJSON writes the periods in ParseRetention's spelling.
func (r Retention) MarshalJSON() ([]byte, error) {
	var parts []string
	if r.Logs > 0 {
		parts = append(parts, `"logs":`+strconv.Quote(FormatRetention(r.Logs)))
	}
	if r.Artifacts > 0 {
		parts = append(parts, `"artifacts":`+strconv.Quote(FormatRetention(r.Artifacts)))
	}
	return []byte("{" + strings.Join(parts, ",") + "}"), nil
}

// ParseRetention reads a retention period: a whole number of days ("30d")
// or a Go duration ("36h", "90m"), between MinRetention and MaxRetention.
func ParseRetention(s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days > int64(MaxRetention/(24*time.Hour)) {
			return 0, fmt.Errorf("%q is longer than %s", s, FormatRetention(MaxRetention))
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("invalid period %q (use days like 30d, or units like 12h)", s)
		}
	}
	if d < MinRetention || d > MaxRetention {
		return 0, fmt.Errorf("%q must be between %s and %s", s, FormatRetention(MinRetention), FormatRetention(MaxRetention))
	}
	return d, nil
}

// FormatRetention spells d as ParseRetention reads it: whole days as
// "30d", whole hours as "36h".
func FormatRetention(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	if d > 0 && d%time.Hour == 0 {
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}

func (j *Job) parseRetention(d *yamlpos.Decoder, n ast.Node, field string) {
	r := &Retention{}
	period := func(dst *time.Duration) func(ast.Node, string) {
		return func(v ast.Node, f string) {
			s, ok := d.Str(v, f)
			if !ok {
				return
			}
			p, err := ParseRetention(s)
			if err != nil {
				d.Add(v, f, "%v", err)
				return
			}
			*dst = p
		}
	}
	if _, ok := d.Object(n, field, 1, map[string]func(ast.Node, string){
		"logs":      period(&r.Logs),
		"artifacts": period(&r.Artifacts),
	}); ok && (r.Logs > 0 || r.Artifacts > 0) {
		j.Retention = r
	}
}
