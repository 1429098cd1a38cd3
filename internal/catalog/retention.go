package catalog

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Bounds of a retention period: shorter than an hour would delete the
// logs of a run while people are still looking at its failure; ten years
// is already "keep".
const (
	MinRetention = time.Hour
	MaxRetention = 3650 * 24 * time.Hour
)

// Retention says how long the logs and artifacts of the job's ended runs
// are kept; zero leaves it to the server's default.
type Retention struct {
	Logs      time.Duration `json:"logs,omitempty"`
	Artifacts time.Duration `json:"artifacts,omitempty"`
}

// ParseRetention reads a retention period: a number of days ("30d") or a
// Go duration of hours and less ("36h", "90m"), between MinRetention and
// MaxRetention.
func ParseRetention(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || days != strconv.FormatInt(n, 10) {
			return 0, fmt.Errorf("invalid retention %q (use days like 30d, or hours like 36h)", s)
		}
		if n > int64(MaxRetention/(24*time.Hour)) {
			return 0, fmt.Errorf("retention %q is longer than %dd", s, MaxRetention/(24*time.Hour))
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("invalid retention %q (use days like 30d, or hours like 36h)", s)
		}
	}
	if d < MinRetention || d > MaxRetention {
		return 0, fmt.Errorf("retention %q must be between 1h and %dd", s, MaxRetention/(24*time.Hour))
	}
	return d, nil
}

func (j *Job) parseRetention(d *yamlpos.Decoder, n ast.Node, field string) {
	period := func(v ast.Node, f string) time.Duration {
		s, ok := d.Str(v, f)
		if !ok {
			return 0
		}
		dur, err := ParseRetention(s)
		if err != nil {
			d.Add(v, f, "%s", err.Error())
			return 0
		}
		return dur
	}
	var r Retention
	if _, ok := d.Object(n, field, 1, map[string]func(ast.Node, string){
		"logs":      func(v ast.Node, f string) { r.Logs = period(v, f) },
		"artifacts": func(v ast.Node, f string) { r.Artifacts = period(v, f) },
	}); ok {
		j.Retention = &r
	}
}
