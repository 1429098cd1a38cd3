package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

func jsonArg(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return []byte(m)
}

// listArg keeps NOT NULL text[] columns non-null: pgx sends a nil slice as NULL.
func listArg(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// timeArg sends a zero time as NULL so that coalesce(..., now) fills it in.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// jsonCol reads a jsonb column; NULL reads back as nil.
type jsonCol struct{ dst *json.RawMessage }

func (c jsonCol) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*c.dst = nil
	case []byte:
		*c.dst = append(json.RawMessage(nil), x...)
	case string:
		*c.dst = json.RawMessage(x)
	default:
		return fmt.Errorf("postgres: json column holds %T", v)
	}
	return nil
}

// Post-scan normalization: times in UTC (pgx returns the local zone), empty
// lists as nil (as the SQLite store does), durations from microseconds.

func utc(t *time.Time) { *t = t.UTC() }

func utcp(p **time.Time) {
	if *p != nil {
		t := (*p).UTC()
		*p = &t
	}
}

func nilEmpty(l *[]string) {
	if len(*l) == 0 {
		*l = nil
	}
}

func us(d int64) time.Duration { return time.Duration(d) * time.Microsecond }

func prefixCols(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = prefix + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}
