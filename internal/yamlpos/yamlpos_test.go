package yamlpos

import (
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/stretchr/testify/require"
)

// testOptions are package catalog's budgets.
var testOptions = Options{Limits: Limits{
	MaxFileSize:  1 << 20,
	MaxFlowDepth: 128,
	MaxSeqRun:    32,
	MaxDepth:     64,
	MaxNodes:     200_000,
}}

func parse(t *testing.T, src string) (*Decoder, ast.Node) {
	t.Helper()
	d := New("f.yaml", testOptions)
	return d, d.Parse([]byte(src))
}

// errStrings formats d's errors, for comparing whole lists at once.
func errStrings(d *Decoder) []string {
	out := make([]string, 0, len(d.Errs))
	for _, e := range d.Errs {
		out = append(out, e.Error())
	}
	return out
}

func TestErrorString(t *testing.T) {
	require.Equal(t, "a.yaml:3:7: run.timeout: must be set", Error{File: "a.yaml", Line: 3, Column: 7, Field: "run.timeout", Message: "must be set"}.Error())
	require.Equal(t, "a.yaml:0:0: too big", Error{File: "a.yaml", Message: "too big"}.Error())
}

func TestParseRefusals(t *testing.T) {
	cases := []struct {
		name, src string
		want      string
	}{
		{"too large", strings.Repeat("x", 1<<20+1), "f.yaml:0:0: file is larger than 1048576 bytes"},
		{"deep flow", strings.Repeat("[", 129), "f.yaml:0:0: nesting deeper than 128 levels"},
		{"long sequence run", strings.Repeat("- ", 33) + "x\n", "f.yaml:0:0: nesting deeper than 32 levels"},
		{"long key run", strings.Repeat("? ", 33) + "x\n", "f.yaml:0:0: nesting deeper than 32 levels"},
		{"two documents", "a: 1\n---\nb: 2\n", "f.yaml:3:1: a file holds one YAML document, found 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, body := parse(t, c.src)
			require.Nil(t, body)
			require.Equal(t, []string{c.want}, errStrings(d))
		})
	}
}

func TestParseShapeIsPerLine(t *testing.T) {
	// Brackets that close again, and sequence entries on separate lines,
	// are within budget however many there are.
	src := strings.Repeat("[", 100) + strings.Repeat("]", 100) + "\n"
	require.Empty(t, checkShape([]byte(src+src), 128, 32))
	require.Empty(t, checkShape([]byte(strings.Repeat("- x\n", 1000)), 128, 32))
}

func TestParseEmptyAndSyntax(t *testing.T) {
	d, body := parse(t, "# nothing\n")
	require.Nil(t, body)
	require.Empty(t, d.Errs)

	d, body = parse(t, "name: hello\nrun: {command: [x]\n")
	require.Nil(t, body)
	require.Len(t, d.Errs, 1)
	require.Equal(t, [2]int{2, 6}, [2]int{d.Errs[0].Line, d.Errs[0].Column}, "%v", d.Errs[0])
}

func TestPositionFileErrors(t *testing.T) {
	opts := testOptions
	opts.PositionFileErrors = true
	d := New("f.yaml", opts)
	require.Nil(t, d.Parse([]byte(strings.Repeat("{", 200))))
	require.Equal(t, []string{"f.yaml:1:1: nesting deeper than 128 levels"}, errStrings(d))

	d = New("f.yaml", opts)
	d.Add(nil, "x", "no node")
	require.Equal(t, []string{"f.yaml:1:1: x: no node"}, errStrings(d))

	d, _ = parse(t, "")
	d.Add(nil, "x", "no node")
	require.Equal(t, []string{"f.yaml:0:0: x: no node"}, errStrings(d))
}

func TestPosition(t *testing.T) {
	_, body := parse(t, "\n  a: 1\n  b: [x, y]\n")
	require.NotNil(t, body)
	l, c := Position(body)
	require.Equal(t, [2]int{2, 3}, [2]int{l, c}, "a mapping is where its first key is")
	l, c = Position(nil)
	require.Equal(t, [2]int{0, 0}, [2]int{l, c})
}

func TestObject(t *testing.T) {
	const src = "name: x\ncount: 3\nextra: 1\nempty: ~\n"
	for _, listKnown := range []bool{false, true} {
		opts := testOptions
		opts.ListKnownFields = listKnown
		d := New("f.yaml", opts)
		body := d.Parse([]byte(src))
		var name string
		var count int64
		present, ok := d.Object(body, "", 0, map[string]func(ast.Node, string){
			"name":  func(v ast.Node, f string) { name, _ = d.Str(v, f) },
			"count": func(v ast.Node, f string) { count, _ = d.Integer(v, f) },
			"empty": func(v ast.Node, f string) { t.Fatal("null values count as absent") },
		})
		require.True(t, ok)
		require.Equal(t, map[string]bool{"name": true, "count": true}, present)
		require.Equal(t, "x", name)
		require.Equal(t, int64(3), count)
		want := `f.yaml:3:1: extra: unknown field "extra"`
		if listKnown {
			want += " (known: count, empty, name)"
		}
		require.Equal(t, []string{want}, errStrings(d))
	}
}

func TestEntriesRefusals(t *testing.T) {
	// The parser finds literal duplicate keys itself; one written through an
	// alias is found here.
	d, body := parse(t, "base: &b {x: 1}\nk: &k a\nm:\n  <<: *b\n  a: 1\n  *k : 2\n  ~: 3\nt: !!str x\nu: *nope\n")
	es, ok := d.Entries(body, "", 0)
	require.True(t, ok, "%v", d.Errs)
	for _, e := range es {
		switch e.Key {
		case "m":
			d.Entries(e.Value, "m", 1)
		case "t":
			d.Str(e.Value, "t")
		case "u":
			d.Str(e.Value, "u")
		}
	}
	require.Equal(t, []string{
		"f.yaml:4:3: m: merge keys (<<) are not supported",
		"f.yaml:6:3: m.a: duplicate key",
		"f.yaml:7:3: m: keys must be strings, got null",
		"f.yaml:8:4: t: YAML tags are not supported",
		"f.yaml:9:4: u: unknown alias \"nope\"",
	}, errStrings(d))

	d, body = parse(t, "- a\n")
	_, ok = d.Entries(body, "", 0)
	require.False(t, ok)
	require.Equal(t, []string{"f.yaml:1:1: must be a mapping, got a list"}, errStrings(d))

	d, body = parse(t, "a: 1\n")
	_, ok = d.Entries(body, "x", 65)
	require.False(t, ok)
	require.Equal(t, []string{"f.yaml:1:1: x: nested deeper than 64 levels"}, errStrings(d))
}

func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		prev := "a" + string(rune('0'+i-1))
		name := "a" + string(rune('0'+i))
		b.WriteString(name + ": &" + name + " [*" + prev + strings.Repeat(", *"+prev, 9) + "]\n")
	}
	d, body := parse(t, b.String())
	start := time.Now()
	_, ok := d.Value(body, "", 0)
	require.False(t, ok)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Len(t, d.Errs, 1)
	require.Contains(t, d.Errs[0].Message, "document too large: more than 200000 values after expanding aliases")
}

func TestScalars(t *testing.T) {
	d, body := parse(t, "s: 'x'\nn: 1\nbig: 18446744073709551615\nb: true\ndur: 1h30m\nbad: soon\nlist: [a, '', 3]\nmap: {k: v, z: ~}\n")
	es, _ := d.Entries(body, "", 0)
	nodes := map[string]ast.Node{}
	for _, e := range es {
		nodes[e.Key] = e.Value
	}
	s, ok := d.Str(nodes["n"], "n")
	require.False(t, ok)
	require.Empty(t, s)
	i, ok := d.Integer(nodes["n"], "n")
	require.True(t, ok)
	require.Equal(t, int64(1), i)
	_, ok = d.Integer(nodes["big"], "big")
	require.False(t, ok)
	bv, ok := d.Boolean(nodes["b"], "b")
	require.True(t, ok && bv)
	dur, ok := d.Duration(nodes["dur"], "dur")
	require.True(t, ok)
	require.Equal(t, 90*time.Minute, dur)
	_, ok = d.Duration(nodes["bad"], "bad")
	require.False(t, ok)
	require.Equal(t, []string{"a"}, d.StrList(nodes["list"], "list"))
	require.Equal(t, map[string]string{"k": "v"}, d.StrMap(nodes["map"], "map", 1))
	require.Equal(t, []string{
		"f.yaml:2:4: n: must be a string, got an integer (quote it)",
		"f.yaml:3:6: big: integer out of range",
		`f.yaml:6:6: bad: invalid duration "soon" (use units, like 30s, 10m or 1h30m)`,
		"f.yaml:7:11: list[1]: must not be empty",
		"f.yaml:7:15: list[2]: must be a string, got an integer (quote it)",
		"f.yaml:8:13: map.z: must be a string, got null",
	}, errStrings(d))
}

func TestValueAndLookup(t *testing.T) {
	d, body := parse(t, "a: [1, {b: x, c: ~}]\nn: .inf\n")
	es, _ := d.Entries(body, "", 0)
	v, ok := d.Value(es[0].Value, "a", 1)
	require.True(t, ok)
	require.Equal(t, []any{uint64(1), map[string]any{"b": "x", "c": nil}}, v)
	_, ok = d.Value(es[1].Value, "n", 1)
	require.False(t, ok)
	require.Equal(t, []string{"f.yaml:2:4: n: unsupported value: a number"}, errStrings(d))

	l, c := Position(d.Lookup(body, []string{"a", "1", "b"}))
	require.Equal(t, [2]int{1, 12}, [2]int{l, c})
	l, c = Position(d.Lookup(body, []string{"a", "7"}))
	require.Equal(t, [2]int{1, 4}, [2]int{l, c}, "the deepest node reached")
}

func TestParseBytesRecovers(t *testing.T) {
	// No known input panics the parser today; the recovery is what turns
	// one into an error of the file.
	f, err := parseBytes([]byte("a: 1\n"))
	require.NoError(t, err)
	require.NotNil(t, f)
}

func TestJoinIndex(t *testing.T) {
	require.Equal(t, "a", Join("", "a"))
	require.Equal(t, "a.b", Join("a", "b"))
	require.Equal(t, "a[2]", Index("a", 2))
	require.True(t, IsNull(nil))
	require.Equal(t, "null", KindOf(&ast.NullNode{}))
}
