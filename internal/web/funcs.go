package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

func (h *Handler) funcs() template.FuncMap {
	return template.FuncMap{
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		// when shows a time relative to now ("3m ago"), the exact time on
		// hover and for screen readers' datetime.
		"when": func(t time.Time) template.HTML {
			if t.IsZero() {
				return ""
			}
			exact := t.UTC().Format("2006-01-02 15:04:05Z")
			rel := humanDuration(h.clock.Now().Sub(t)) + " ago"
			return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339) + `" title="` + exact + `">` + template.HTMLEscapeString(rel) + `</time>`)
		},
		// details makes a stored JSON value readable: HTML escapes
		// (\u003c) undone and indented; html/template escapes it again
		// for the page.
		"details": readableJSON,
		"deref": func(t *time.Time) time.Time {
			if t == nil {
				return time.Time{}
			}
			return *t
		},
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "never"
			}
			return humanDuration(h.clock.Now().Sub(t)) + " ago"
		},
		"dur": humanDuration,
		"runDur": func(r *store.Run) string {
			end := h.clock.Now()
			if r.FinishedAt != nil {
				end = *r.FinishedAt
			}
			return humanDuration(end.Sub(r.CreatedAt))
		},
		"short": func(s string) string {
			if len(s) > 12 {
				return s[:12]
			}
			return s
		},
		"join": strings.Join,
		"without": func(list []string, drop string) []string {
			out := make([]string, 0, len(list))
			for _, s := range list {
				if s != drop {
					out = append(out, s)
				}
			}
			return out
		},
		"terminal":   func(s store.RunState) bool { return s.Terminal() },
		"hasPrefix":  strings.HasPrefix,
		"trimPrefix": strings.TrimPrefix,
		"str":        func(v any) string { return fmt.Sprint(v) },
		"bytes":      humanBytes,
	}
}

// humanDuration rounds a duration for people: 850ms, 4.2s, 3m10s, 2h5m, 3d4h.
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := int(d / (24 * time.Hour))
	return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
}

func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// readableJSON indents raw JSON without HTML escaping; anything that is
// not JSON is shown as it is.
func readableJSON(raw []byte) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}
