package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// Template is a lease key template of a job definition.
type Template struct {
	Key        string `json:"key"`
	OnConflict string `json:"on_conflict,omitempty"` // queue (default) | reject
	Limit      int    `json:"limit,omitempty"`       // default 1
	Once       bool   `json:"once,omitempty"`
}

// Vars are the values placeholders render from.
type Vars struct {
	Params  json.RawMessage // the run's params object
	Channel string
	Job     string
	// Window is the request time, or a scheduled run's fire time.
	Window time.Time
}

var (
	placeholderRE = regexp.MustCompile(`\{[^{}]*\}`)
	valueRE       = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	keyRE         = regexp.MustCompile(`^[A-Za-z0-9:._-]+$`)
)

// ParamError names the parameter whose value cannot be part of a key.
type ParamError struct {
	Field   string
	Message string
}

func (e *ParamError) Error() string { return e.Field + ": " + e.Message }

// Render renders every template. Substituted values must match
// [A-Za-z0-9._-]+ so that no parameter can forge another key (a value with a
// ':' could turn backfill:account:{params.a} into someone else's key), and
// the rendered key must match [A-Za-z0-9:._-]+. {window.date} is the
// window's UTC date (2026-08-14), {window.hour} its UTC hour (00–23).
// Duplicate keys are merged (the strictest options win).
func Render(templates []Template, v Vars) ([]store.LeaseKey, error) {
	var params map[string]json.RawMessage
	if len(v.Params) > 0 && string(v.Params) != "null" {
		if err := json.Unmarshal(v.Params, &params); err != nil {
			return nil, errors.New("params is not a JSON object")
		}
	}
	byKey := map[string]store.LeaseKey{}
	for _, t := range templates {
		var perr error
		key := placeholderRE.ReplaceAllStringFunc(t.Key, func(ph string) string {
			val, err := value(ph[1:len(ph)-1], params, v)
			if err != nil && perr == nil {
				perr = err
			}
			return val
		})
		if perr != nil {
			return nil, perr
		}
		if !keyRE.MatchString(key) {
			return nil, fmt.Errorf("lease key %q (from %q) may contain only A-Z a-z 0-9 : . _ -", key, t.Key)
		}
		k := store.LeaseKey{Key: key, Limit: max(t.Limit, 1), OnConflict: t.OnConflict, Once: t.Once}
		if k.OnConflict == "" {
			k.OnConflict = "queue"
		}
		if prev, ok := byKey[key]; ok {
			k.Limit = min(k.Limit, prev.Limit)
			k.Once = k.Once || prev.Once
			if prev.OnConflict == "reject" {
				k.OnConflict = "reject"
			}
		}
		byKey[key] = k
	}
	out := make([]store.LeaseKey, 0, len(byKey))
	for _, k := range byKey {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func value(name string, params map[string]json.RawMessage, v Vars) (string, error) {
	var s string
	switch {
	case name == "channel":
		s = v.Channel
	case name == "job":
		s = v.Job
	case name == "window.date":
		s = v.Window.UTC().Format("2006-01-02")
	case name == "window.hour":
		s = v.Window.UTC().Format("15")
	case strings.HasPrefix(name, "params."):
		field := strings.TrimPrefix(name, "params.")
		raw, ok := params[field]
		if !ok {
			return "", &ParamError{Field: field, Message: "is needed for a lease key but not given"}
		}
		var x any
		if err := json.Unmarshal(raw, &x); err != nil {
			return "", &ParamError{Field: field, Message: "is not valid JSON"}
		}
		switch t := x.(type) {
		case string:
			s = t
		case float64:
			s = strconv.FormatFloat(t, 'f', -1, 64)
		case bool:
			s = strconv.FormatBool(t)
		default:
			return "", &ParamError{Field: field, Message: "must be a string, number or boolean to be part of a lease key"}
		}
		if !valueRE.MatchString(s) {
			return "", &ParamError{Field: field, Message: fmt.Sprintf("value %q cannot be part of a lease key: only A-Z a-z 0-9 . _ - are allowed", s)}
		}
		return s, nil
	default:
		return "", fmt.Errorf("unknown placeholder {%s}", name)
	}
	if !valueRE.MatchString(s) {
		return "", fmt.Errorf("{%s} renders %q, which cannot be part of a lease key", name, s)
	}
	return s, nil
}
