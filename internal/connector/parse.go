package connector

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Connector types.
const (
	TypeStatic   = "static"
	TypePostgres = "postgres"
)

// Access levels.
const (
	LevelRead  = "read"
	LevelWrite = "write"
)

// Budgets for hostile input, the same reasoning as package catalog: the YAML
// parser is slow on deep nesting, so nesting is bounded by a byte scan before
// parsing, and alias expansion is bounded by counting visited nodes.
const (
	// MaxFileSize is the largest connector file accepted, in bytes.
	MaxFileSize = 256 << 10

	maxFlowDepth = 64
	maxSeqRun    = 32
	maxNodes     = 20_000
	maxHops      = 64
)

var (
	nameRe       = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	channelRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	secretNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	roleRe       = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	keyRe        = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,62}$`)
)

// Error is one problem of a connector file, shaped like catalog.Error (kept
// separate so this package does not depend on the catalog).
type Error struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Error formats the problem the way compilers do, so editors can jump to it.
func (e Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Field, e.Message)
}

// Definition is one parsed connectors/<name>.yaml. It holds secret names
// only; values live encrypted in the store.
type Definition struct {
	Name     string
	Type     string              // TypeStatic | TypePostgres
	Bindings map[string]*Binding // by channel
	File     string
}

// Binding is a connector's configuration for one channel.
type Binding struct {
	// postgres: Secret names the secret holding the admin DSN; ReadRole and
	// WriteRole are the roles a minted login role is made a member of.
	Secret    string
	ReadRole  string
	WriteRole string
	// static: environment KEY → secret name, per level.
	Read  map[string]string
	Write map[string]string
}

// Level returns the effective level of a connector: write only when the job
// declares write and the run's grants give write. Anything else — including
// unknown or empty values — is read, so a typo can never widen access.
func Level(declared, granted string) string {
	if declared == LevelWrite && granted == LevelWrite {
		return LevelWrite
	}
	return LevelRead
}

// Parse parses connectors/<name>.yaml. It reports every problem with its
// position and returns a nil Definition when there is any.
func Parse(file string, data []byte) (*Definition, []Error) {
	d := &decoder{file: file, anchors: map[string]ast.Node{}}
	body := d.parse(data)
	if body == nil {
		if len(d.errs) == 0 {
			d.errs = append(d.errs, Error{File: file, Line: 1, Column: 1, Message: "empty connector file"})
		}
		return nil, d.errs
	}
	def := &Definition{File: file, Bindings: map[string]*Binding{}}
	var bindingsNode ast.Node
	present, ok := d.object(body, "", map[string]func(ast.Node, string){
		"name": func(n ast.Node, f string) {
			if s, ok := d.str(n, f); ok {
				def.Name = s
				want := strings.TrimSuffix(strings.TrimSuffix(path.Base(file), ".yaml"), ".yml")
				switch {
				case !nameRe.MatchString(s):
					d.add(n, f, "must match %s", nameRe)
				case s != want:
					d.add(n, f, "must equal the file name %q", want)
				}
			}
		},
		"type": func(n ast.Node, f string) {
			if s, ok := d.str(n, f); ok {
				def.Type = s
				if s != TypeStatic && s != TypePostgres {
					d.add(n, f, "must be %q or %q", TypeStatic, TypePostgres)
				}
			}
		},
		"bindings": func(n ast.Node, f string) { bindingsNode = n },
	})
	if !ok {
		return nil, d.errs
	}
	for _, k := range []string{"name", "type", "bindings"} {
		if !present[k] {
			d.add(body, k, "required")
		}
	}
	if bindingsNode != nil && (def.Type == TypeStatic || def.Type == TypePostgres) {
		es, ok := d.entries(bindingsNode, "bindings")
		if ok && len(es) == 0 {
			d.add(bindingsNode, "bindings", "must bind at least one channel")
		}
		for _, e := range es {
			f := "bindings." + e.key
			if !channelRe.MatchString(e.key) {
				d.add(e.keyNode, f, "channel must match %s", channelRe)
				continue
			}
			if e.value == nil {
				d.add(e.keyNode, f, "must be a mapping, got null")
				continue
			}
			if b := d.binding(def.Type, e.value, f); b != nil {
				def.Bindings[e.key] = b
			}
		}
	}
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return def, nil
}

func (d *decoder) binding(typ string, n ast.Node, field string) *Binding {
	b := &Binding{}
	role := func(dst *string) func(ast.Node, string) {
		return func(n ast.Node, f string) {
			if s, ok := d.str(n, f); ok {
				if !roleRe.MatchString(s) {
					d.add(n, f, "must match %s", roleRe)
					return
				}
				*dst = s
			}
		}
	}
	set := func(dst *map[string]string) func(ast.Node, string) {
		return func(n ast.Node, f string) { *dst = d.keySet(n, f) }
	}
	var fields map[string]func(ast.Node, string)
	if typ == TypePostgres {
		fields = map[string]func(ast.Node, string){
			"secret": func(n ast.Node, f string) {
				if s, ok := d.str(n, f); ok {
					if !secretNameRe.MatchString(s) {
						d.add(n, f, "secret name must match %s", secretNameRe)
						return
					}
					b.Secret = s
				}
			},
			"read_role":  role(&b.ReadRole),
			"write_role": role(&b.WriteRole),
		}
	} else {
		fields = map[string]func(ast.Node, string){"read": set(&b.Read), "write": set(&b.Write)}
	}
	before := len(d.errs)
	present, ok := d.object(n, field, fields)
	if !ok {
		return nil
	}
	if typ == TypePostgres {
		if !present["secret"] {
			d.add(n, field+".secret", "required")
		}
		if !present["read_role"] && !present["write_role"] {
			d.add(n, field, "needs read_role, write_role or both")
		}
	} else if !present["read"] && !present["write"] {
		d.add(n, field, "needs read, write or both")
	}
	if len(d.errs) > before {
		return nil
	}
	return b
}

// keySet decodes {KEY: secret-name}.
func (d *decoder) keySet(n ast.Node, field string) map[string]string {
	es, ok := d.entries(n, field)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for _, e := range es {
		f := field + "." + e.key
		if !keyRe.MatchString(e.key) {
			d.add(e.keyNode, f, "key must match %s", keyRe)
			continue
		}
		if e.value == nil {
			d.add(e.keyNode, f, "must be a secret name, got null")
			continue
		}
		s, ok := d.str(e.value, f)
		if !ok {
			continue
		}
		if !secretNameRe.MatchString(s) {
			d.add(e.value, f, "secret name must match %s", secretNameRe)
			continue
		}
		out[e.key] = s
	}
	if len(es) == 0 {
		d.add(n, field, "must name at least one secret")
	}
	return out
}

// ---- a small position-keeping YAML walker ----

type decoder struct {
	file      string
	errs      []Error
	anchors   map[string]ast.Node
	visited   int
	exhausted bool
}

func (d *decoder) parse(data []byte) ast.Node {
	if len(data) > MaxFileSize {
		d.errs = append(d.errs, Error{File: d.file, Line: 1, Column: 1, Message: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)})
		return nil
	}
	if msg := checkShape(data); msg != "" {
		d.errs = append(d.errs, Error{File: d.file, Line: 1, Column: 1, Message: msg})
		return nil
	}
	f, err := parseBytes(data)
	if err != nil {
		e := Error{File: d.file, Line: 1, Column: 1, Message: err.Error()}
		var ye yaml.Error
		if errors.As(err, &ye) {
			e.Message = ye.GetMessage()
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				e.Line, e.Column = tk.Position.Line, tk.Position.Column
			}
		}
		d.errs = append(d.errs, e)
		return nil
	}
	var bodies []ast.Node
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			bodies = append(bodies, doc.Body)
		}
	}
	if len(bodies) > 1 {
		d.add(bodies[1], "", "a file holds one YAML document, found %d", len(bodies))
		return nil
	}
	if len(bodies) == 0 {
		return nil
	}
	d.collectAnchors(bodies[0], 0)
	return bodies[0]
}

// parseBytes turns a parser panic into an error: one bad file must not take
// the server down.
func parseBytes(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("cannot parse YAML: %v", r)
		}
	}()
	return parser.ParseBytes(data, 0)
}

// checkShape rejects nesting the parser would take too long on.
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
	if n == nil || depth > 4*maxHops {
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
		return 1, 1
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
		return 1, 1
	}
	return tk.Position.Line, tk.Position.Column
}

func (d *decoder) add(n ast.Node, field, format string, args ...any) {
	line, col := position(n)
	d.errs = append(d.errs, Error{File: d.file, Line: line, Column: col, Field: field, Message: fmt.Sprintf(format, args...)})
}

// resolve looks through anchors and aliases, charging the node budget, and
// refuses tags.
func (d *decoder) resolve(n ast.Node, field string) ast.Node {
	for hops := 0; ; hops++ {
		if d.exhausted {
			return nil
		}
		d.visited++
		if d.visited > maxNodes || hops > maxHops {
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

type entry struct {
	key     string
	keyNode ast.Node
	value   ast.Node // nil when null
}

// entries returns a mapping's keys in order; duplicate and non-string keys
// are reported and skipped. ok is false when n is not a mapping.
func (d *decoder) entries(n ast.Node, field string) ([]entry, bool) {
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
		var key string
		switch kv := d.resolve(keyNode, field).(type) {
		case nil:
			continue
		case *ast.StringNode:
			key = kv.Value
		case *ast.IntegerNode, *ast.BoolNode, *ast.FloatNode:
			key = kv.GetToken().Value
		default:
			d.add(keyNode, field, "keys must be strings, got %s", kindOf(kv))
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

// object decodes a mapping with a fixed set of keys; unknown keys are errors
// and null values count as absent.
func (d *decoder) object(n ast.Node, field string, fields map[string]func(ast.Node, string)) (map[string]bool, bool) {
	es, ok := d.entries(n, field)
	if !ok {
		return nil, false
	}
	present := map[string]bool{}
	for _, e := range es {
		fn, known := fields[e.key]
		if !known {
			keys := make([]string, 0, len(fields))
			for k := range fields {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			d.add(e.keyNode, join(field, e.key), "unknown field %q (known: %s)", e.key, strings.Join(keys, ", "))
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

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}
