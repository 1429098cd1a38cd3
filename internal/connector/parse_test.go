package connector

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const warehouseYAML = `name: warehouse
type: postgres                   # a login role minted per run
bindings:
  prod:    {secret: warehouse-prod-admin-dsn, read_role: warehouse_read, write_role: warehouse_write}
  sandbox: {secret: warehouse-sandbox-admin-dsn, read_role: warehouse_read}
`

const billingYAML = `name: billing-api
type: static
bindings:
  prod:    {read: {TOKEN: billing-readonly-token}, write: {TOKEN: billing-admin-token, URL: billing-url}}
  staging: &s
    read: {TOKEN: billing-staging-token}
  dev: *s
`

func TestParseValid(t *testing.T) {
	def, errs := Parse("connectors/warehouse.yaml", []byte(warehouseYAML))
	require.Empty(t, errs)
	require.Equal(t, "warehouse", def.Name)
	require.Equal(t, TypePostgres, def.Type)
	require.Equal(t, &Binding{Secret: "warehouse-prod-admin-dsn", ReadRole: "warehouse_read", WriteRole: "warehouse_write"}, def.Bindings["prod"])
	require.Equal(t, &Binding{Secret: "warehouse-sandbox-admin-dsn", ReadRole: "warehouse_read"}, def.Bindings["sandbox"])

	def, errs = Parse("connectors/billing-api.yaml", []byte(billingYAML))
	require.Empty(t, errs)
	require.Equal(t, TypeStatic, def.Type)
	require.Equal(t, map[string]string{"TOKEN": "billing-readonly-token"}, def.Bindings["prod"].Read)
	require.Equal(t, map[string]string{"TOKEN": "billing-admin-token", "URL": "billing-url"}, def.Bindings["prod"].Write)
	require.Equal(t, def.Bindings["staging"], def.Bindings["dev"], "aliases resolve")
}

func TestParseErrors(t *testing.T) {
	type want struct {
		line, col int
		field     string
		msg       string
	}
	cases := []struct {
		name, file, src string
		want            []want
	}{
		{"name must equal file", "connectors/wh.yaml", "name: warehouse\ntype: static\nbindings: {prod: {read: {A: b}}}\n",
			[]want{{1, 7, "name", "must equal the file name"}}},
		{"bad name", "connectors/Bad.yaml", "name: Bad\ntype: static\nbindings: {prod: {read: {A: b}}}\n",
			[]want{{1, 7, "name", "must match"}}},
		{"unknown top-level key", "connectors/w.yaml", "name: w\ntype: static\nbindings: {prod: {read: {A: b}}}\nowner: x\n",
			[]want{{4, 1, "owner", "unknown field"}}},
		{"bad type", "connectors/w.yaml", "name: w\ntype: mysql\nbindings: {}\n",
			[]want{{2, 7, "type", "must be"}}},
		{"missing fields", "connectors/w.yaml", "name: w\n",
			[]want{{1, 1, "type", "required"}, {1, 1, "bindings", "required"}}},
		{"postgres binding problems", "connectors/w.yaml",
			"name: w\ntype: postgres\nbindings:\n  prod:\n    read_role: Warehouse\n    user: x\n",
			[]want{{5, 16, "bindings.prod.read_role", "must match"}, {6, 5, "bindings.prod.user", "unknown field"}, {5, 5, "bindings.prod.secret", "required"}}},
		{"static bad key and secret", "connectors/w.yaml",
			"name: w\ntype: static\nbindings:\n  prod:\n    read: {token: a, OK: 'Bad Name'}\n",
			[]want{{5, 12, "bindings.prod.read.token", "key must match"}, {5, 26, "bindings.prod.read.OK", "secret name must match"}}},
		{"postgres keys on static", "connectors/w.yaml",
			"name: w\ntype: static\nbindings:\n  prod: {secret: s}\n",
			[]want{{4, 10, "bindings.prod.secret", "unknown field"}, {4, 10, "bindings.prod", "needs read, write or both"}}},
		{"bad channel", "connectors/w.yaml", "name: w\ntype: static\nbindings:\n  Prod: {read: {A: b}}\n",
			[]want{{4, 3, "bindings.Prod", "channel must match"}}},
		{"syntax error", "connectors/w.yaml", "name: w\ntype: [\n", nil},
		{"empty", "connectors/w.yaml", "", []want{{1, 1, "", "empty"}}},
		{"two documents", "connectors/w.yaml", "name: w\n---\nname: w\n", []want{{3, 1, "", "one YAML document"}}},
		{"tag", "connectors/w.yaml", "name: !!str w\ntype: static\nbindings: {prod: {read: {A: b}}}\n", []want{{1, 7, "name", "tags"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			def, errs := Parse(c.file, []byte(c.src))
			require.Nil(t, def)
			require.NotEmpty(t, errs)
			for _, e := range errs {
				require.Equal(t, c.file, e.File)
				require.Positive(t, e.Line, "%+v", e)
				require.Positive(t, e.Column, "%+v", e)
			}
			for _, w := range c.want {
				found := false
				for _, e := range errs {
					if e.Field == w.field && strings.Contains(e.Message, w.msg) {
						require.Equal(t, [2]int{w.line, w.col}, [2]int{e.Line, e.Column}, "%s", e)
						found = true
					}
				}
				require.True(t, found, "want %+v in %v", w, errs)
			}
		})
	}
}

func TestLevel(t *testing.T) {
	require.Equal(t, LevelWrite, Level("write", "write"))
	require.Equal(t, LevelRead, Level("write", "read"))
	require.Equal(t, LevelRead, Level("write", ""))
	require.Equal(t, LevelRead, Level("read", "write"))
	require.Equal(t, LevelRead, Level("WRITE", "write"))
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(warehouseYAML))
	f.Add([]byte(billingYAML))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("bindings: {prod: {read: {A: *x}}}"))
	f.Add([]byte("{{{{[[[["))
	f.Fuzz(func(t *testing.T, data []byte) {
		def, errs := Parse("connectors/warehouse.yaml", data)
		if (def == nil) == (len(errs) == 0) {
			t.Fatalf("exactly one of definition and errors: %v %v", def, errs)
		}
		if def != nil {
			if def.Name != "warehouse" || len(def.Bindings) == 0 {
				t.Fatalf("accepted an invalid definition: %+v", def)
			}
			for ch, b := range def.Bindings {
				if !channelRe.MatchString(ch) || b == nil {
					t.Fatalf("bad binding %q", ch)
				}
			}
		}
	})
}
