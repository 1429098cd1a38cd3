package connector

import (
	"path"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/yamlpos"
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

// MaxFileSize is the largest connector file accepted, in bytes.
const MaxFileSize = 256 << 10

// yamlOptions are the budgets of a connector file (see package yamlpos),
// tighter than a definitions file's. Problems always have a position (1:1
// for the file as a whole), and unknown keys list the known ones.
var yamlOptions = yamlpos.Options{
	Limits: yamlpos.Limits{
		MaxFileSize:  MaxFileSize,
		MaxFlowDepth: 64,
		MaxSeqRun:    32,
		MaxDepth:     64, // alias hops; connector files nest three deep
		MaxNodes:     20_000,
	},
	PositionFileErrors: true,
	ListKnownFields:    true,
}

var (
	nameRe       = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	channelRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	secretNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	roleRe       = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	keyRe        = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,62}$`)
)

// Error is one problem of a connector file, the same type as catalog.Error.
// Line and Column are always positive: a problem of the file as a whole is
// at 1:1.
type Error = yamlpos.Error

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
	d := yamlpos.New(file, yamlOptions)
	body := d.Parse(data)
	if body == nil {
		if len(d.Errs) == 0 {
			d.Errs = append(d.Errs, Error{File: file, Line: 1, Column: 1, Message: "empty connector file"})
		}
		return nil, d.Errs
	}
	def := &Definition{File: file, Bindings: map[string]*Binding{}}
	var bindingsNode ast.Node
	present, ok := d.Object(body, "", 0, map[string]func(ast.Node, string){
		"name": func(n ast.Node, f string) {
			if s, ok := d.Str(n, f); ok {
				def.Name = s
				want := strings.TrimSuffix(strings.TrimSuffix(path.Base(file), ".yaml"), ".yml")
				switch {
				case !nameRe.MatchString(s):
					d.Add(n, f, "must match %s", nameRe)
				case s != want:
					d.Add(n, f, "must equal the file name %q", want)
				}
			}
		},
		"type": func(n ast.Node, f string) {
			if s, ok := d.Str(n, f); ok {
				def.Type = s
				if s != TypeStatic && s != TypePostgres {
					d.Add(n, f, "must be %q or %q", TypeStatic, TypePostgres)
				}
			}
		},
		"bindings": func(n ast.Node, f string) { bindingsNode = n },
	})
	if !ok {
		return nil, d.Errs
	}
	for _, k := range []string{"name", "type", "bindings"} {
		if !present[k] {
			d.Add(body, k, "required")
		}
	}
	if bindingsNode != nil && (def.Type == TypeStatic || def.Type == TypePostgres) {
		es, ok := d.Entries(bindingsNode, "bindings", 1)
		if ok && len(es) == 0 {
			d.Add(bindingsNode, "bindings", "must bind at least one channel")
		}
		for _, e := range es {
			f := "bindings." + e.Key
			if !channelRe.MatchString(e.Key) {
				d.Add(e.KeyNode, f, "channel must match %s", channelRe)
				continue
			}
			if e.Value == nil {
				d.Add(e.KeyNode, f, "must be a mapping, got null")
				continue
			}
			if b := binding(d, def.Type, e.Value, f); b != nil {
				def.Bindings[e.Key] = b
			}
		}
	}
	if len(d.Errs) > 0 {
		return nil, d.Errs
	}
	return def, nil
}

func binding(d *yamlpos.Decoder, typ string, n ast.Node, field string) *Binding {
	b := &Binding{}
	role := func(dst *string) func(ast.Node, string) {
		return func(n ast.Node, f string) {
			if s, ok := d.Str(n, f); ok {
				if !roleRe.MatchString(s) {
					d.Add(n, f, "must match %s", roleRe)
					return
				}
				*dst = s
			}
		}
	}
	set := func(dst *map[string]string) func(ast.Node, string) {
		return func(n ast.Node, f string) { *dst = keySet(d, n, f) }
	}
	var fields map[string]func(ast.Node, string)
	if typ == TypePostgres {
		fields = map[string]func(ast.Node, string){
			"secret": func(n ast.Node, f string) {
				if s, ok := d.Str(n, f); ok {
					if !secretNameRe.MatchString(s) {
						d.Add(n, f, "secret name must match %s", secretNameRe)
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
	before := len(d.Errs)
	present, ok := d.Object(n, field, 2, fields)
	if !ok {
		return nil
	}
	if typ == TypePostgres {
		if !present["secret"] {
			d.Add(n, field+".secret", "required")
		}
		if !present["read_role"] && !present["write_role"] {
			d.Add(n, field, "needs read_role, write_role or both")
		}
	} else if !present["read"] && !present["write"] {
		d.Add(n, field, "needs read, write or both")
	}
	if len(d.Errs) > before {
		return nil
	}
	return b
}

// keySet decodes {KEY: secret-name}.
func keySet(d *yamlpos.Decoder, n ast.Node, field string) map[string]string {
	es, ok := d.Entries(n, field, 3)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for _, e := range es {
		f := field + "." + e.Key
		if !keyRe.MatchString(e.Key) {
			d.Add(e.KeyNode, f, "key must match %s", keyRe)
			continue
		}
		if e.Value == nil {
			d.Add(e.KeyNode, f, "must be a secret name, got null")
			continue
		}
		s, ok := d.Str(e.Value, f)
		if !ok {
			continue
		}
		if !secretNameRe.MatchString(s) {
			d.Add(e.Value, f, "secret name must match %s", secretNameRe)
			continue
		}
		out[e.Key] = s
	}
	if len(es) == 0 {
		d.Add(n, field, "must name at least one secret")
	}
	return out
}

// EnvName is the environment variable of a connector's key:
// JOBPLANE_CONNECTOR_<NAME>_<KEY>, NAME upper-cased with '-' as '_'.
func EnvName(connector, key string) string {
	return "JOBPLANE_CONNECTOR_" + strings.ToUpper(strings.ReplaceAll(connector, "-", "_")) + "_" + key
}

// Pinned is one connector a job declares, as a run pins it at request
// time: the level the job asks for and the connector's definition at the
// run's commit.
type Pinned struct {
	Declared string      `json:"declared"` // read | write
	Def      *Definition `json:"definition"`
}
