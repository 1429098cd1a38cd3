package catalog

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Budgets for hostile input. The YAML parser is quadratic in nesting depth
// (100,000 nested brackets took over a minute when measured), so nesting is
// bounded by a byte scan before the parser ever sees the document; alias
// expansion is bounded by counting every node visited while decoding.
const (
	// MaxFileSize is the largest definitions file accepted, in bytes.
	MaxFileSize = 1 << 20

	maxFlowDepth = 128     // unclosed [ or { at any point
	maxSeqRun    = 32      // "- - - x" entries on one line
	maxDepth     = 64      // nesting of decoded values
	maxNodes     = 200_000 // nodes visited per file, aliases expanded
)

// decoder walks one file's syntax tree and collects errors with positions.
type decoder struct {
	file      string
	errs      []Error
	anchors   map[string]ast.Node
	visited   int
	exhausted bool
}

// parseFile parses data into its single document body. A nil body with no
// error means the file is empty.
func parseFile(file string, data []byte) (ast.Node, *decoder) {
	d := &decoder{file: file, anchors: map[string]ast.Node{}}
	if len(data) > MaxFileSize {
		d.errs = append(d.errs, Error{File: file, Message: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)})
		return nil, d
	}
	if msg := checkShape(data); msg != "" {
		d.errs = append(d.errs, Error{File: file, Message: msg})
		return nil, d
	}
	f, err := parseBytes(data)
	if err != nil {
		e := Error{File: file, Message: err.Error()}
		var ye yaml.Error
		if errors.As(err, &ye) {
			e.Message = ye.GetMessage()
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				e.Line, e.Column = tk.Position.Line, tk.Position.Column
			}
		}
		d.errs = append(d.errs, e)
		return nil, d
	}
	var bodies []ast.Node
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			bodies = append(bodies, doc.Body)
		}
	}
	switch len(bodies) {
	case 0:
		return nil, d
	case 1:
	default:
		d.add(bodies[1], "", "a file holds one YAML document, found %d", len(bodies))
		return nil, d
	}
	d.collectAnchors(bodies[0], 0)
	return bodies[0], d
}

// parseBytes turns a parser panic into an error: fuzzing third-party parsers
// finds these, and one bad file must not take the server down.
func parseBytes(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("cannot parse YAML: %v", r)
		}
	}()
	return parser.ParseBytes(data, 0)
}

// checkShape rejects nesting the parser would take too long on. It counts
// brackets inside quoted strings too; that only makes it stricter, and no
// definition needs a hundred unbalanced brackets.
func checkShape(data []byte) string {
	depth, run := 0, 0
	lineStart := true
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch c {
		case '[', '{':
			depth++
			if depth > maxFlowDepth {
				return fmt.Sprintf("nesting deeper than %d levels", maxFlowDepth)
			}
		case ']', '}':
			if depth > 0 {
				depth--
			}
		}
		switch {
		case c == '\n':
			lineStart, run = true, 0
		case lineStart && (c == ' ' || c == '\t'):
		case lineStart && (c == '-' || c == '?') && (i+1 == len(data) || data[i+1] == ' '):
			run++
			if run > maxSeqRun {
				return fmt.Sprintf("nesting deeper than %d levels", maxSeqRun)
			}
		default:
			lineStart = false
		}
	}
	return ""
}

func (d *decoder) collectAnchors(n ast.Node, depth int) {
	if n == nil || depth > 4*maxDepth {
		return
	}
	switch v := n.(type) {
	case *ast.AnchorNode:
		if v.Name != nil {
			d.anchors[v.Name.String()] = v.Value
		}
		d.collectAnchors(v.Value, depth+1)
	case *ast.MappingNode:
		for _, mv := range v.Values {
			d.collectAnchors(mv, depth+1)
		}
	case *ast.MappingValueNode:
		d.collectAnchors(v.Key, depth+1)
		d.collectAnchors(v.Value, depth+1)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			d.collectAnchors(e, depth+1)
		}
	case *ast.TagNode:
		d.collectAnchors(v.Value, depth+1)
	case *ast.MappingKeyNode:
		d.collectAnchors(v.Value, depth+1)
	}
}

func position(n ast.Node) (int, int) {
	switch v := n.(type) {
	case nil:
		return 0, 0
	case *ast.MappingNode:
		// The mapping's own token is its first ':'; users look for the first key.
		if len(v.Values) > 0 && v.Values[0] != nil {
			return position(v.Values[0])
		}
	case *ast.MappingValueNode:
		if v.Key != nil {
			return position(v.Key)
		}
	case *ast.AnchorNode:
		if v.Value != nil {
			return position(v.Value)
		}
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

func (d *decoder) add(n ast.Node, field, format string, args ...any) {
	line, col := position(n)
	d.errs = append(d.errs, Error{File: d.file, Line: line, Column: col, Field: field, Message: fmt.Sprintf(format, args...)})
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func index(parent string, i int) string {
	return fmt.Sprintf("%s[%d]", parent, i)
}

// resolve looks through anchors and aliases and charges the node budget. It
// returns nil, after recording why, for anything the definitions format does
// not allow (tags, exhausted budget).
func (d *decoder) resolve(n ast.Node, field string) ast.Node {
	for hops := 0; ; hops++ {
		if d.exhausted {
			return nil
		}
		d.visited++
		if d.visited > maxNodes || hops > maxDepth {
			d.exhausted = true
			d.add(n, field, "document too large: more than %d values after expanding aliases", maxNodes)
			return nil
		}
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			name := ""
			if v.Value != nil {
				name = v.Value.String()
			}
			target, ok := d.anchors[name]
			if !ok {
				d.add(n, field, "unknown alias %q", name)
				return nil
			}
			n = target
		case *ast.TagNode:
			d.add(n, field, "YAML tags are not supported")
			return nil
		default:
			return n
		}
	}
}

func isNull(n ast.Node) bool {
	_, ok := n.(*ast.NullNode)
	return n == nil || ok
}

func kindOf(n ast.Node) string {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode:
		return "an integer"
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.NullNode:
		return "null"
	default:
		return "an unsupported value"
	}
}

// entry is one key of a mapping.
type entry struct {
	key     string
	keyNode ast.Node
	value   ast.Node // nil when the value is null
}

// entries returns a mapping's keys in order; duplicate and non-string keys are
// reported and skipped. ok is false when n is not a mapping.
func (d *decoder) entries(n ast.Node, field string, depth int) ([]entry, bool) {
	if depth > maxDepth {
		d.add(n, field, "nested deeper than %d levels", maxDepth)
		return nil, false
	}
	n = d.resolve(n, field)
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
		d.add(n, field, "must be a mapping, got %s", kindOf(n))
		return nil, false
	}
	seen := map[string]bool{}
	out := make([]entry, 0, len(values))
	for _, mv := range values {
		if mv == nil {
			continue
		}
		var keyNode ast.Node = mv.Key
		if _, ok := keyNode.(*ast.MergeKeyNode); ok {
			d.add(keyNode, field, "merge keys (<<) are not supported")
			continue
		}
		k := d.resolve(keyNode, field)
		var key string
		switch kv := k.(type) {
		case nil:
			continue
		case *ast.StringNode:
			key = kv.Value
		case *ast.IntegerNode, *ast.BoolNode, *ast.FloatNode:
			key = kv.GetToken().Value
		default:
			d.add(keyNode, field, "keys must be strings, got %s", kindOf(k))
			continue
		}
		if seen[key] {
			d.add(keyNode, join(field, key), "duplicate key")
			continue
		}
		seen[key] = true
		var value ast.Node = mv.Value
		if isNull(value) {
			value = nil
		}
		out = append(out, entry{key: key, keyNode: keyNode, value: value})
	}
	return out, true
}

// object decodes a mapping with a fixed set of keys. Null values count as
// absent. It returns the keys that were present, for required-field checks.
func (d *decoder) object(n ast.Node, field string, depth int, fields map[string]func(v ast.Node, field string)) (map[string]bool, bool) {
	es, ok := d.entries(n, field, depth)
	if !ok {
		return nil, false
	}
	present := map[string]bool{}
	for _, e := range es {
		fn, known := fields[e.key]
		if !known {
			d.add(e.keyNode, join(field, e.key), "unknown field %q", e.key)
			continue
		}
		if e.value == nil {
			continue
		}
		present[e.key] = true
		fn(e.value, join(field, e.key))
	}
	return present, true
}

func (d *decoder) str(n ast.Node, field string) (string, bool) {
	n = d.resolve(n, field)
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
		d.add(n, field, "must be a string, got %s (quote it)", kindOf(n))
		return "", false
	}
}

func (d *decoder) list(n ast.Node, field string) ([]ast.Node, bool) {
	n = d.resolve(n, field)
	switch v := n.(type) {
	case nil:
		return nil, false
	case *ast.SequenceNode:
		return v.Values, true
	default:
		d.add(n, field, "must be a list, got %s", kindOf(n))
		return nil, false
	}
}

// strList decodes a list of non-empty strings.
func (d *decoder) strList(n ast.Node, field string) []string {
	items, ok := d.list(n, field)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		s, ok := d.str(item, index(field, i))
		if !ok {
			continue
		}
		if s == "" {
			d.add(item, index(field, i), "must not be empty")
			continue
		}
		out = append(out, s)
	}
	return out
}

// strMap decodes a mapping of string to string.
func (d *decoder) strMap(n ast.Node, field string, depth int) map[string]string {
	es, ok := d.entries(n, field, depth)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(es))
	for _, e := range es {
		if e.value == nil {
			d.add(e.keyNode, join(field, e.key), "must be a string, got null")
			continue
		}
		if s, ok := d.str(e.value, join(field, e.key)); ok {
			out[e.key] = s
		}
	}
	return out
}

func (d *decoder) integer(n ast.Node, field string) (int64, bool) {
	n = d.resolve(n, field)
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
		d.add(n, field, "integer out of range")
		return 0, false
	default:
		d.add(n, field, "must be an integer, got %s", kindOf(n))
		return 0, false
	}
}

func (d *decoder) boolean(n ast.Node, field string) (bool, bool) {
	n = d.resolve(n, field)
	switch v := n.(type) {
	case nil:
		return false, false
	case *ast.BoolNode:
		return v.Value, true
	default:
		d.add(n, field, "must be true or false, got %s", kindOf(n))
		return false, false
	}
}

func (d *decoder) duration(n ast.Node, field string) (time.Duration, bool) {
	n = d.resolve(n, field)
	switch v := n.(type) {
	case nil:
		return 0, false
	case *ast.StringNode:
		dur, err := time.ParseDuration(v.Value)
		if err != nil {
			d.add(n, field, "invalid duration %q (use units, like 30s, 10m or 1h30m)", v.Value)
			return 0, false
		}
		return dur, true
	default:
		d.add(n, field, "must be a duration like 30s, 10m or 1h30m, got %s", kindOf(n))
		return 0, false
	}
}

// value converts a subtree into JSON-compatible Go values, for the parts of
// the format that are free-form (schemas, attributes, schedule params).
func (d *decoder) value(n ast.Node, field string, depth int) (any, bool) {
	if depth > maxDepth {
		d.add(n, field, "nested deeper than %d levels", maxDepth)
		return nil, false
	}
	n = d.resolve(n, field)
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
		d.add(n, field, "integer out of range")
		return nil, false
	case *ast.FloatNode:
		if math.IsInf(v.Value, 0) || math.IsNaN(v.Value) {
			d.add(n, field, "number out of range")
			return nil, false
		}
		return v.Value, true
	case *ast.SequenceNode:
		out := make([]any, 0, len(v.Values))
		ok := true
		for i, item := range v.Values {
			x, good := d.value(item, index(field, i), depth+1)
			ok = ok && good
			out = append(out, x)
		}
		return out, ok
	case *ast.MappingNode, *ast.MappingValueNode:
		es, ok := d.entries(n, field, depth)
		if !ok {
			return nil, false
		}
		out := make(map[string]any, len(es))
		for _, e := range es {
			if e.value == nil {
				out[e.key] = nil
				continue
			}
			x, good := d.value(e.value, join(field, e.key), depth+1)
			ok = ok && good
			out[e.key] = x
		}
		return out, ok
	default:
		d.add(n, field, "unsupported value: %s", kindOf(n))
		return nil, false
	}
}

// lookup follows a JSON pointer's tokens through a subtree and returns the
// deepest node reached, so schema errors can point at a line.
func (d *decoder) lookup(n ast.Node, tokens []string) ast.Node {
	for _, tok := range tokens {
		r := d.resolve(n, "")
		switch v := r.(type) {
		case *ast.MappingNode, *ast.MappingValueNode:
			es, _ := d.entries(v, "", 0)
			found := false
			for _, e := range es {
				if e.key == tok && e.value != nil {
					n, found = e.value, true
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
