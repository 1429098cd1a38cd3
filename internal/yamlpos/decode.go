package yamlpos

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Entry is one key of a mapping.
type Entry struct {
	Key     string
	KeyNode ast.Node
	Value   ast.Node // nil when the value is null
}

// Entries returns a mapping's keys in order; duplicate and non-string keys
// and merge keys are reported and skipped. ok is false when n is not a
// mapping. depth is the mapping's nesting, checked against Limits.MaxDepth.
func (d *Decoder) Entries(n ast.Node, field string, depth int) ([]Entry, bool) {
	if depth > d.opts.MaxDepth {
		d.Add(n, field, "nested deeper than %d levels", d.opts.MaxDepth)
		return nil, false
	}
	n = d.Resolve(n, field)
	if n == nil {
		return nil, false
	}
	var values []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	default:
		d.Add(n, field, "must be a mapping, got %s", KindOf(n))
		return nil, false
	}
	seen := map[string]bool{}
	out := make([]Entry, 0, len(values))
	for _, mv := range values {
		if mv == nil {
			continue
		}
		var keyNode ast.Node = mv.Key
		if _, ok := keyNode.(*ast.MergeKeyNode); ok {
			d.Add(keyNode, field, "merge keys (<<) are not supported")
			continue
		}
		k := d.Resolve(keyNode, field)
		var key string
		switch kv := k.(type) {
		case nil:
			continue
		case *ast.StringNode:
			key = kv.Value
		case *ast.IntegerNode, *ast.BoolNode, *ast.FloatNode:
			key = kv.GetToken().Value
		default:
			d.Add(keyNode, field, "keys must be strings, got %s", KindOf(k))
			continue
		}
		if seen[key] {
			d.Add(keyNode, Join(field, key), "duplicate key")
			continue
		}
		seen[key] = true
		var value ast.Node = mv.Value
		if IsNull(value) {
			value = nil
		}
		out = append(out, Entry{Key: key, KeyNode: keyNode, Value: value})
	}
	return out, true
}

// Object decodes a mapping with a fixed set of keys, calling fields[key]
// with each non-null value and its field path. Unknown keys are errors and
// null values count as absent. It returns the keys that were present, for
// required-field checks; ok is false when n is not a mapping.
func (d *Decoder) Object(n ast.Node, field string, depth int, fields map[string]func(v ast.Node, field string)) (present map[string]bool, ok bool) {
	es, ok := d.Entries(n, field, depth)
	if !ok {
		return nil, false
	}
	present = map[string]bool{}
	for _, e := range es {
		fn, known := fields[e.Key]
		if !known {
			if d.opts.ListKnownFields {
				keys := make([]string, 0, len(fields))
				for k := range fields {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				d.Add(e.KeyNode, Join(field, e.Key), "unknown field %q (known: %s)", e.Key, strings.Join(keys, ", "))
			} else {
				d.Add(e.KeyNode, Join(field, e.Key), "unknown field %q", e.Key)
			}
			continue
		}
		if e.Value == nil {
			continue
		}
		present[e.Key] = true
		fn(e.Value, Join(field, e.Key))
	}
	return present, true
}

// Str decodes a string; numbers and booleans are not strings.
func (d *Decoder) Str(n ast.Node, field string) (string, bool) {
	n = d.Resolve(n, field)
	switch v := n.(type) {
	case nil:
		return "", false
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value == nil {
			return "", true
		}
		return v.Value.Value, true
	default:
		d.Add(n, field, "must be a string, got %s (quote it)", KindOf(n))
		return "", false
	}
}

// List decodes a sequence into its items.
func (d *Decoder) List(n ast.Node, field string) ([]ast.Node, bool) {
	n = d.Resolve(n, field)
	switch v := n.(type) {
	case nil:
		return nil, false
	case *ast.SequenceNode:
		return v.Values, true
	default:
		d.Add(n, field, "must be a list, got %s", KindOf(n))
		return nil, false
	}
}

// StrList decodes a list of non-empty strings.
func (d *Decoder) StrList(n ast.Node, field string) []string {
	items, ok := d.List(n, field)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		s, ok := d.Str(item, Index(field, i))
		if !ok {
			continue
		}
		if s == "" {
			d.Add(item, Index(field, i), "must not be empty")
			continue
		}
		out = append(out, s)
	}
	return out
}

// StrMap decodes a mapping of string to string.
func (d *Decoder) StrMap(n ast.Node, field string, depth int) map[string]string {
	es, ok := d.Entries(n, field, depth)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(es))
	for _, e := range es {
		if e.Value == nil {
			d.Add(e.KeyNode, Join(field, e.Key), "must be a string, got null")
			continue
		}
		if s, ok := d.Str(e.Value, Join(field, e.Key)); ok {
			out[e.Key] = s
		}
	}
	return out
}

// Integer decodes an integer that fits an int64.
func (d *Decoder) Integer(n ast.Node, field string) (int64, bool) {
	n = d.Resolve(n, field)
	switch v := n.(type) {
	case nil:
		return 0, false
	case *ast.IntegerNode:
		switch i := v.Value.(type) {
		case int64:
			return i, true
		case uint64:
			if i <= math.MaxInt64 {
				return int64(i), true
			}
		}
		d.Add(n, field, "integer out of range")
		return 0, false
	default:
		d.Add(n, field, "must be an integer, got %s", KindOf(n))
		return 0, false
	}
}

// Boolean decodes true or false.
func (d *Decoder) Boolean(n ast.Node, field string) (bool, bool) {
	n = d.Resolve(n, field)
	switch v := n.(type) {
	case nil:
		return false, false
	case *ast.BoolNode:
		return v.Value, true
	default:
		d.Add(n, field, "must be true or false, got %s", KindOf(n))
		return false, false
	}
}

// Duration decodes a string in time.ParseDuration's format.
func (d *Decoder) Duration(n ast.Node, field string) (time.Duration, bool) {
	n = d.Resolve(n, field)
	switch v := n.(type) {
	case nil:
		return 0, false
	case *ast.StringNode:
		dur, err := time.ParseDuration(v.Value)
		if err != nil {
			d.Add(n, field, "invalid duration %q (use units, like 30s, 10m or 1h30m)", v.Value)
			return 0, false
		}
		return dur, true
	default:
		d.Add(n, field, "must be a duration like 30s, 10m or 1h30m, got %s", KindOf(n))
		return 0, false
	}
}

// Value converts a subtree into JSON-compatible Go values (nil, string,
// bool, int64, uint64, float64, []any, map[string]any), for the parts of a
// format that are free-form. depth is n's nesting.
func (d *Decoder) Value(n ast.Node, field string, depth int) (any, bool) {
	if depth > d.opts.MaxDepth {
		d.Add(n, field, "nested deeper than %d levels", d.opts.MaxDepth)
		return nil, false
	}
	n = d.Resolve(n, field)
	switch v := n.(type) {
	case nil:
		return nil, false
	case *ast.NullNode:
		return nil, true
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value == nil {
			return "", true
		}
		return v.Value.Value, true
	case *ast.BoolNode:
		return v.Value, true
	case *ast.IntegerNode:
		switch i := v.Value.(type) {
		case int64:
			return i, true
		case uint64:
			return i, true
		}
		d.Add(n, field, "integer out of range")
		return nil, false
	case *ast.FloatNode:
		if math.IsInf(v.Value, 0) || math.IsNaN(v.Value) {
			d.Add(n, field, "number out of range")
			return nil, false
		}
		return v.Value, true
	case *ast.SequenceNode:
		out := make([]any, 0, len(v.Values))
		ok := true
		for i, item := range v.Values {
			x, good := d.Value(item, Index(field, i), depth+1)
			ok = ok && good
			out = append(out, x)
		}
		return out, ok
	case *ast.MappingNode, *ast.MappingValueNode:
		es, ok := d.Entries(n, field, depth)
		if !ok {
			return nil, false
		}
		out := make(map[string]any, len(es))
		for _, e := range es {
			if e.Value == nil {
				out[e.Key] = nil
				continue
			}
			x, good := d.Value(e.Value, Join(field, e.Key), depth+1)
			ok = ok && good
			out[e.Key] = x
		}
		return out, ok
	default:
		d.Add(n, field, "unsupported value: %s", KindOf(n))
		return nil, false
	}
}

// Lookup follows a JSON pointer's tokens through a subtree and returns the
// deepest node reached, so errors found in a decoded value can point at a
// line.
func (d *Decoder) Lookup(n ast.Node, tokens []string) ast.Node {
	for _, tok := range tokens {
		r := d.Resolve(n, "")
		switch v := r.(type) {
		case *ast.MappingNode, *ast.MappingValueNode:
			es, _ := d.Entries(v, "", 0)
			found := false
			for _, e := range es {
				if e.Key == tok && e.Value != nil {
					n, found = e.Value, true
					break
				}
			}
			if !found {
				return n
			}
		case *ast.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v.Values) {
				return n
			}
			n = v.Values[i]
		default:
			return n
		}
	}
	return n
}
