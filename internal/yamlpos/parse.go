package yamlpos

import (
	"errors"
	"fmt"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Limits are the budgets one file is held to; every field must be positive.
// The YAML parser is quadratic in nesting depth, so flow nesting and sequence
// runs are bounded by a byte scan before the parser ever sees the document;
// alias expansion is bounded by counting every node visited while decoding.
type Limits struct {
	// MaxFileSize is the largest file accepted, in bytes.
	MaxFileSize int
	// MaxFlowDepth bounds the unclosed [ or { at any point.
	MaxFlowDepth int
	// MaxSeqRun bounds the "- - - x" entries on one line.
	MaxSeqRun int
	// MaxDepth bounds the nesting of decoded values (the depth passed to
	// Entries, Object, StrMap and Value) and the alias hops of one Resolve.
	MaxDepth int
	// MaxNodes bounds the nodes visited per file, aliases expanded.
	MaxNodes int
}

// Options configure a Decoder.
type Options struct {
	Limits
	// PositionFileErrors reports problems without a position (about the
	// file as a whole, or on a node the parser did not place) at 1:1
	// instead of 0:0, for callers whose positions must be positive.
	PositionFileErrors bool
	// ListKnownFields appends the known keys, sorted, to Object's
	// unknown-field errors: `unknown field "x" (known: a, b)`.
	ListKnownFields bool
}

// Decoder walks one file's syntax tree and collects its errors with
// positions. It is not safe for concurrent use.
type Decoder struct {
	// File names the file in every error.
	File string
	// Errs are the problems found so far, in the order found. Callers may
	// append their own.
	Errs []Error

	opts      Options
	anchors   map[string]ast.Node
	visited   int
	exhausted bool
}

// New returns a Decoder for the named file.
func New(file string, opts Options) *Decoder {
	return &Decoder{File: file, opts: opts, anchors: map[string]ast.Node{}}
}

// unpositioned is where a problem without a position is reported.
func (d *Decoder) unpositioned() (int, int) {
	if d.opts.PositionFileErrors {
		return 1, 1
	}
	return 0, 0
}

func (d *Decoder) fileError(msg string) Error {
	line, col := d.unpositioned()
	return Error{File: d.File, Line: line, Column: col, Message: msg}
}

// Parse parses data into its single document body, recording why in Errs
// when it cannot. A nil body with no error means the file is empty.
func (d *Decoder) Parse(data []byte) ast.Node {
	if len(data) > d.opts.MaxFileSize {
		d.Errs = append(d.Errs, d.fileError(fmt.Sprintf("file is larger than %d bytes", d.opts.MaxFileSize)))
		return nil
	}
	if msg := checkShape(data, d.opts.MaxFlowDepth, d.opts.MaxSeqRun); msg != "" {
		d.Errs = append(d.Errs, d.fileError(msg))
		return nil
	}
	f, err := parseBytes(data)
	if err != nil {
		e := d.fileError(err.Error())
		var ye yaml.Error
		if errors.As(err, &ye) {
			e.Message = ye.GetMessage()
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				e.Line, e.Column = tk.Position.Line, tk.Position.Column
			}
		}
		d.Errs = append(d.Errs, e)
		return nil
	}
	var bodies []ast.Node
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			bodies = append(bodies, doc.Body)
		}
	}
	switch len(bodies) {
	case 0:
		return nil
	case 1:
	default:
		d.Add(bodies[1], "", "a file holds one YAML document, found %d", len(bodies))
		return nil
	}
	d.collectAnchors(bodies[0], 0)
	return bodies[0]
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
func checkShape(data []byte, maxFlowDepth, maxSeqRun int) string {
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

func (d *Decoder) collectAnchors(n ast.Node, depth int) {
	if n == nil || depth > 4*d.opts.MaxDepth {
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

// Position returns the 1-based line and column where n is written, or 0, 0
// when it has none. A mapping is where its first key is.
func Position(n ast.Node) (line, column int) {
	line, column, _ = position(n)
	return line, column
}

func position(n ast.Node) (int, int, bool) {
	switch v := n.(type) {
	case nil:
		return 0, 0, false
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
		return 0, 0, false
	}
	return tk.Position.Line, tk.Position.Column, true
}

// Add records a problem at n's position (see Options.PositionFileErrors for
// a node without one).
func (d *Decoder) Add(n ast.Node, field, format string, args ...any) {
	line, col, ok := position(n)
	if !ok {
		line, col = d.unpositioned()
	}
	d.Errs = append(d.Errs, Error{File: d.File, Line: line, Column: col, Field: field, Message: fmt.Sprintf(format, args...)})
}

// Join returns the field path of key inside parent.
func Join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// Index returns the field path of item i of the list parent.
func Index(parent string, i int) string {
	return fmt.Sprintf("%s[%d]", parent, i)
}

// Resolve looks through anchors and aliases and charges the node budget. It
// returns nil, after recording why, for anything the formats do not allow
// (tags, unknown aliases, exhausted budget).
func (d *Decoder) Resolve(n ast.Node, field string) ast.Node {
	for hops := 0; ; hops++ {
		if d.exhausted {
			return nil
		}
		d.visited++
		if d.visited > d.opts.MaxNodes || hops > d.opts.MaxDepth {
			d.exhausted = true
			d.Add(n, field, "document too large: more than %d values after expanding aliases", d.opts.MaxNodes)
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
				d.Add(n, field, "unknown alias %q", name)
				return nil
			}
			n = target
		case *ast.TagNode:
			d.Add(n, field, "YAML tags are not supported")
			return nil
		default:
			return n
		}
	}
}

// IsNull reports whether n is absent or null.
func IsNull(n ast.Node) bool {
	_, ok := n.(*ast.NullNode)
	return n == nil || ok
}

// KindOf names n's kind for error messages: "a mapping", "a list", ...
func KindOf(n ast.Node) string {
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
