package ciimport

import (
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
	"github.com/rhysd/actionlint"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// yamlOptions are the budgets of one CI file (see package yamlpos): the
// files are written by people, but the import may be pointed at anyone's
// repository.
var yamlOptions = yamlpos.Options{
	Limits: yamlpos.Limits{
		MaxFileSize:  MaxFileSize,
		MaxFlowDepth: 64,
		MaxSeqRun:    32,
		MaxDepth:     64,
		MaxNodes:     200_000,
	},
	PositionFileErrors: true,
	ListKnownFields:    true,
}

// action is a local action's metadata (action.yml): what the import needs
// to inline a composite action.
type action struct {
	using  string
	inputs []Param
	steps  []*actionlint.Step
	lines  []string
}

// parseAction reads an action.yml. actionlint parses workflows with
// positions but action metadata without them, so the file is walked here
// and its steps are built as actionlint steps, positions included.
func parseAction(file string, data []byte) (*action, []Error) {
	d := yamlpos.New(file, yamlOptions)
	body := d.Parse(data)
	if body == nil {
		if len(d.Errs) == 0 {
			d.Add(nil, "", "empty action metadata")
		}
		return nil, d.Errs
	}
	a := &action{lines: strings.Split(string(data), "\n")}
	ignore := func(ast.Node, string) {}
	d.Object(body, "", 0, map[string]func(ast.Node, string){
		"name": ignore, "author": ignore, "description": ignore, "outputs": ignore, "branding": ignore,
		"inputs": func(v ast.Node, f string) {
			es, _ := d.Entries(v, f, 1)
			for _, e := range es {
				p := Param{Name: e.Key, Type: "string"}
				if e.Value != nil {
					d.Object(e.Value, yamlpos.Join(f, e.Key), 2, map[string]func(ast.Node, string){
						"description": func(v ast.Node, f string) { p.Description, _ = scalar(d, v, f) },
						"required":    func(v ast.Node, f string) { p.Required, _ = d.Boolean(v, f) },
						"default": func(v ast.Node, f string) {
							if s, ok := scalar(d, v, f); ok {
								p.Default = &s
							}
						},
						"deprecationMessage": ignore,
					})
				}
				a.inputs = append(a.inputs, p)
			}
		},
		"runs": func(v ast.Node, f string) {
			d.Object(v, f, 1, map[string]func(ast.Node, string){
				"using": func(v ast.Node, f string) { a.using, _ = d.Str(v, f) },
				"steps": func(v ast.Node, f string) {
					items, _ := d.List(v, f)
					for i, item := range items {
						if s := actionStep(d, item, yamlpos.Index(f, i)); s != nil {
							a.steps = append(a.steps, s)
						}
					}
				},
				"main": ignore, "pre": ignore, "post": ignore, "pre-if": ignore, "post-if": ignore,
				"image": ignore, "args": ignore, "env": ignore, "entrypoint": ignore,
				"pre-entrypoint": ignore, "post-entrypoint": ignore,
			})
		},
	})
	return a, d.Errs
}

// scalar reads a string, number or boolean as the text written: action
// inputs are strings whatever YAML makes of them.
func scalar(d *yamlpos.Decoder, n ast.Node, field string) (string, bool) {
	r := d.Resolve(n, field)
	switch v := r.(type) {
	case nil:
		return "", false
	case *ast.StringNode, *ast.LiteralNode:
		return d.Str(v, field)
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return v.GetToken().Value, true
	case *ast.NullNode:
		return "", true
	}
	d.Add(r, field, "must be a string, got %s", yamlpos.KindOf(r))
	return "", false
}

// alString converts a scalar to actionlint's string with its position.
func alString(d *yamlpos.Decoder, n ast.Node, field string) *actionlint.String {
	s, ok := scalar(d, n, field)
	if !ok {
		return nil
	}
	line, col := yamlpos.Position(n)
	quoted := false
	if tk := n.GetToken(); tk != nil {
		quoted = tk.Type == token.SingleQuoteType || tk.Type == token.DoubleQuoteType
	}
	return &actionlint.String{Value: s, Quoted: quoted, Pos: &actionlint.Pos{Line: line, Col: col}}
}

func actionStep(d *yamlpos.Decoder, n ast.Node, field string) *actionlint.Step {
	s := &actionlint.Step{}
	line, col := yamlpos.Position(n)
	s.Pos = &actionlint.Pos{Line: line, Col: col}
	var run, shell, dir, uses *actionlint.String
	inputs := map[string]*actionlint.Input{}
	ignore := func(ast.Node, string) {}
	_, ok := d.Object(n, field, 2, map[string]func(ast.Node, string){
		"name":              func(v ast.Node, f string) { s.Name = alString(d, v, f) },
		"id":                func(v ast.Node, f string) { s.ID = alString(d, v, f) },
		"if":                func(v ast.Node, f string) { s.If = alString(d, v, f) },
		"run":               func(v ast.Node, f string) { run = alString(d, v, f) },
		"shell":             func(v ast.Node, f string) { shell = alString(d, v, f) },
		"working-directory": func(v ast.Node, f string) { dir = alString(d, v, f) },
		"uses":              func(v ast.Node, f string) { uses = alString(d, v, f) },
		"with": func(v ast.Node, f string) {
			es, _ := d.Entries(v, f, 3)
			for _, e := range es {
				in := &actionlint.Input{Name: &actionlint.String{Value: e.Key}}
				if e.Value != nil {
					in.Value = alString(d, e.Value, yamlpos.Join(f, e.Key))
				}
				inputs[strings.ToLower(e.Key)] = in
			}
		},
		"env": func(v ast.Node, f string) {
			es, _ := d.Entries(v, f, 3)
			s.Env = &actionlint.Env{Vars: map[string]*actionlint.EnvVar{}}
			for _, e := range es {
				ev := &actionlint.EnvVar{Name: &actionlint.String{Value: e.Key}}
				if e.Value != nil {
					ev.Value = alString(d, e.Value, yamlpos.Join(f, e.Key))
				}
				s.Env.Vars[strings.ToLower(e.Key)] = ev
			}
		},
		"continue-on-error": ignore,
		"timeout-minutes":   ignore,
	})
	if !ok {
		return nil
	}
	switch {
	case run != nil && uses != nil:
		d.Add(n, field, "a step has run or uses, not both")
		return nil
	case run != nil:
		s.Exec = &actionlint.ExecRun{Run: run, Shell: shell, WorkingDirectory: dir, RunPos: run.Pos}
	case uses != nil:
		s.Exec = &actionlint.ExecAction{Uses: uses, Inputs: inputs}
	default:
		d.Add(n, field, "a step needs run or uses")
		return nil
	}
	return s
}
