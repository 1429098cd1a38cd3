package sqlite

import (
	"encoding/json"
	"fmt"
	"time"
)

// Stored representations: see the package comment.

func micros(t time.Time) any {
	if t.IsZero() {
		return nil // lets coalesce(?, now) fill it in
	}
	return t.UnixMicro()
}

func microsPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

// microsZero stores a zero time as itself rather than as "now".
func microsZero(t time.Time) int64 { return t.UnixMicro() }

func jsonText(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return string(m)
}

func listText(l []string) string {
	if len(l) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(l)
	return string(b)
}

func asBytes(v any) ([]byte, bool) {
	switch x := v.(type) {
	case string:
		return []byte(x), true
	case []byte:
		return append([]byte(nil), x...), true
	}
	return nil, false
}

type timeCol struct{ dst *time.Time }

func (c timeCol) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*c.dst = time.Time{}
	case int64:
		*c.dst = time.UnixMicro(x).UTC()
	default:
		return fmt.Errorf("sqlite: time column holds %T", v)
	}
	return nil
}

type timePtrCol struct{ dst **time.Time }

func (c timePtrCol) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*c.dst = nil
	case int64:
		t := time.UnixMicro(x).UTC()
		*c.dst = &t
	default:
		return fmt.Errorf("sqlite: time column holds %T", v)
	}
	return nil
}

type durCol struct{ dst *time.Duration }

func (c durCol) Scan(v any) error {
	x, ok := v.(int64)
	if !ok {
		return fmt.Errorf("sqlite: duration column holds %T", v)
	}
	*c.dst = time.Duration(x) * time.Microsecond
	return nil
}

type jsonCol struct{ dst *json.RawMessage }

func (c jsonCol) Scan(v any) error {
	if v == nil {
		*c.dst = nil
		return nil
	}
	b, ok := asBytes(v)
	if !ok {
		return fmt.Errorf("sqlite: json column holds %T", v)
	}
	*c.dst = b
	return nil
}

// listCol reads a JSON string list; an empty list reads back as nil.
type listCol struct{ dst *[]string }

func (c listCol) Scan(v any) error {
	*c.dst = nil
	if v == nil {
		return nil
	}
	b, ok := asBytes(v)
	if !ok {
		return fmt.Errorf("sqlite: list column holds %T", v)
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("sqlite: list column: %w", err)
	}
	if len(l) > 0 {
		*c.dst = l
	}
	return nil
}
