package yamlpos

import (
	"testing"

	"github.com/goccy/go-yaml/ast"
)

// walk decodes every value under n the ways the formats do.
func walk(d *Decoder, n ast.Node, field string, depth int) {
	d.Value(n, field, depth)
	d.Str(n, field)
	d.StrList(n, field)
	d.StrMap(n, field, depth)
	d.Object(n, field, depth, map[string]func(ast.Node, string){
		"a": func(v ast.Node, f string) { walk(d, v, f, depth+1) },
		"n": func(v ast.Node, f string) { d.Integer(v, f); d.Boolean(v, f); d.Duration(v, f) },
	})
	d.Lookup(n, []string{"a", "0", "b"})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"name: hello\nrun: {command: [x]}\n",
		"a: &a [*a]\n",
		"name: !!binary aGk=\n",
		"{{{{[[[[",
		"? [a]\n: b\n",
		"groups: {g: {attributes: {a: .inf, b: .nan, c: 0x10}}}\n",
		"rules: [{id: x, jobs: ['['], users: [~]}]\n",
		"\t- x\n",
		"a: {n: 18446744073709551615, b: true}\nn: 1h\n",
		"base: &b {x: 1}\nm: {<<: *b}\n",
		"bindings: {prod: {read: {A: *x}}}",
		"staging: &s\n  read: {TOKEN: t}\ndev: *s\n",
		"a: 1\n---\nb: 2\n",
		"a: |\n  x\n  y\nb: >\n  z\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, positioned bool) {
		opts := testOptions
		opts.PositionFileErrors = positioned
		opts.ListKnownFields = positioned
		d := New("f.yaml", opts)
		body := d.Parse(data)
		if body != nil {
			if len(d.Errs) > 0 {
				t.Fatalf("a body and errors: %v", d.Errs)
			}
			walk(d, body, "", 0)
		}
		for _, e := range d.Errs {
			if e.File != "f.yaml" || e.Message == "" {
				t.Fatalf("error without file or message: %+v", e)
			}
			if e.Line < 0 || e.Column < 0 || (positioned && (e.Line == 0 || e.Column == 0)) {
				t.Fatalf("bad position: %+v", e)
			}
		}
		if d.visited > opts.MaxNodes+1 {
			t.Fatalf("visited %d nodes, budget %d", d.visited, opts.MaxNodes)
		}
	})
}
