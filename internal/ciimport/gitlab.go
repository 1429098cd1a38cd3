package ciimport

import (
	"fmt"
	"io/fs"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/yamlpos"
)

// GitLab limits, as GitLab documents them: include nesting and extends
// depth.
const (
	maxIncludeDepth = 100
	maxExtendsDepth = 11
)

// glGlobal are the top-level keywords of a pipeline; every other key is a
// job (a hidden one when it starts with '.').
var glGlobal = map[string]bool{
	"default": true, "include": true, "stages": true, "variables": true, "workflow": true,
	"image": true, "services": true, "cache": true, "before_script": true, "after_script": true, "types": true, "spec": true,
}

// glJobKeys are the keys of a job.
var glJobKeys = map[string]bool{
	"after_script": true, "allow_failure": true, "artifacts": true, "before_script": true, "cache": true,
	"coverage": true, "dast_configuration": true, "dependencies": true, "environment": true, "except": true,
	"extends": true, "hooks": true, "id_tokens": true, "identity": true, "image": true, "inherit": true,
	"interruptible": true, "manual_confirmation": true, "needs": true, "only": true, "pages": true, "parallel": true,
	"release": true, "resource_group": true, "retry": true, "rules": true, "run": true, "script": true, "secrets": true,
	"services": true, "stage": true, "start_in": true, "tags": true, "timeout": true, "trigger": true,
	"variables": true, "when": true,
}

// glVal is a value and the file it is written in.
type glVal struct {
	node ast.Node
	key  ast.Node
	d    *yamlpos.Decoder
	// prev is the variables block this one extends (see mergeVars).
	prev *glVal
}

type glImport struct {
	src  Source
	inv  *Inventory
	seen map[string]bool
	// top are the pipeline's top-level keys after includes: the main file
	// wins over what it includes.
	top   map[string]glVal
	order []string
	// vars are the pipeline's variables (with their prefilled-form
	// descriptions), by name.
	vars    map[string]glVar
	varList []string
	// work is what is left of the current job's budget of extends and
	// !reference expansions: both can refer to the same template many
	// times at every level, which grows exponentially with the depth.
	work      int
	exhausted bool
	// decoders are every file's, whose errors are collected at the end:
	// jobs are read after all the files, and report into them.
	decoders []*yamlpos.Decoder
}

type glVar struct {
	value       string
	description string
	options     []string
	hasForm     bool // described, so the Run pipeline form shows it
}

// GitLab inventories a GitLab CI pipeline and its local includes.
func GitLab(srcs []Source) *Inventory {
	inv := &Inventory{Kind: KindGitLab}
	for _, src := range srcs {
		for _, f := range src.Files {
			g := &glImport{src: src, inv: inv, seen: map[string]bool{}, top: map[string]glVal{}, vars: map[string]glVar{}}
			g.file(f, 0, true, nil)
			g.jobs(f)
			for _, d := range g.decoders {
				inv.Errors = append(inv.Errors, d.Errs...)
			}
		}
	}
	inv.finish()
	return inv
}

// glInclude is a local file an include: names, and where it names it.
type glInclude struct {
	path  string
	d     *yamlpos.Decoder
	node  ast.Node
	field string
}

// file reads one pipeline file, its includes first, so that its own keys
// override theirs. from is the include: entry that names the file (nil for
// the pipeline file itself): a file that cannot be read is reported there,
// where it can be fixed.
func (g *glImport) file(p string, depth int, main bool, from *glInclude) {
	display := g.src.display(p)
	if g.seen[p] {
		return
	}
	g.seen[p] = true
	data, err := read(g.src.FS, p)
	if err != nil {
		if from != nil {
			from.d.Add(from.node, from.field, "cannot read %s: %s", display, readErr(err))
			return
		}
		g.inv.Errors = append(g.inv.Errors, Error{File: display, Line: 1, Column: 1, Message: "cannot read: " + readErr(err)})
		return
	}
	g.inv.Files = append(g.inv.Files, display)
	d := yamlpos.New(display, yamlOptions)
	g.decoders = append(g.decoders, d)
	body := d.Parse(data)
	if body == nil {
		if len(d.Errs) == 0 && main {
			d.Add(nil, "", "empty pipeline")
		}
		return
	}
	es := entries(d, body, "", 0)
	for _, e := range es {
		if e.Key == "include" && e.Value != nil {
			for _, inc := range g.includes(d, e.Value, depth) {
				g.file(inc.path, depth+1, false, &inc)
			}
		}
	}
	for _, e := range es {
		if e.Value == nil {
			if !glGlobal[e.Key] {
				d.Add(e.KeyNode, e.Key, "job %q is empty", e.Key)
			}
			continue
		}
		if e.Key == "include" {
			continue
		}
		if e.Key == "variables" {
			g.variables(d, e.Value)
			continue
		}
		if _, ok := g.top[e.Key]; !ok {
			g.order = append(g.order, e.Key)
		}
		g.top[e.Key] = glVal{node: e.Value, key: e.KeyNode, d: d}
	}
}

// includes returns the local files an include: names, noting the others.
func (g *glImport) includes(d *yamlpos.Decoder, n ast.Node, depth int) []glInclude {
	if depth >= maxIncludeDepth {
		d.Add(n, "include", "includes nested deeper than %d levels", maxIncludeDepth)
		return nil
	}
	var items []ast.Node
	if r := d.Resolve(n, "include"); r != nil {
		if seq, ok := r.(*ast.SequenceNode); ok {
			items = seq.Values
		} else {
			items = []ast.Node{r}
		}
	}
	var out []glInclude
	add := func(paths []string, node ast.Node, field string) {
		for _, p := range paths {
			out = append(out, glInclude{path: p, d: d, node: node, field: field})
		}
	}
	for i, it := range items {
		f := yamlpos.Index("include", i)
		r := d.Resolve(it, f)
		switch v := r.(type) {
		case *ast.StringNode:
			if strings.Contains(v.Value, "://") {
				g.inv.Warnings = append(g.inv.Warnings, Error{File: d.File, Line: line(v), Column: col(v), Field: f,
					Message: fmt.Sprintf("remote include %s is not read; its jobs are not in the inventory", v.Value)})
				continue
			}
			add(g.glob(localPath(v.Value)), v, f)
		case *ast.MappingNode, *ast.MappingValueNode:
			for _, e := range entries(d, v, f, 1) {
				s, _ := d.Str(e.Value, yamlpos.Join(f, e.Key))
				switch e.Key {
				case "local":
					add(g.glob(localPath(s)), e.Value, yamlpos.Join(f, e.Key))
				case "project", "remote", "template", "component":
					g.inv.Warnings = append(g.inv.Warnings, Error{File: d.File, Line: line(e.KeyNode), Column: col(e.KeyNode), Field: yamlpos.Join(f, e.Key),
						Message: fmt.Sprintf("include %s %s is not read (only local files are); its jobs are not in the inventory", e.Key, s)})
				case "file", "ref", "rules", "inputs", "cache", "integrity":
				default:
					d.Add(e.KeyNode, yamlpos.Join(f, e.Key), "unknown include key %q", e.Key)
				}
			}
		case nil:
		default:
			d.Add(r, f, "must be a file name or a mapping, got %s", yamlpos.KindOf(r))
		}
	}
	return out
}

func localPath(s string) []string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "/")
	if s == "" {
		return nil
	}
	return []string{path.Clean(s)}
}

// glob expands a local include with wildcards (GitLab allows *), sorted.
func (g *glImport) glob(ps []string) []string {
	var out []string
	for _, p := range ps {
		if !strings.ContainsAny(p, "*?[") {
			out = append(out, p)
			continue
		}
		matches, _ := fsGlob(g.src, p)
		out = append(out, matches...)
	}
	return out
}

func line(n ast.Node) int {
	l, _ := yamlpos.Position(n)
	return max(l, 1)
}

func col(n ast.Node) int {
	_, c := yamlpos.Position(n)
	return max(c, 1)
}

// entries is yamlpos's Entries with GitLab's merge keys (<<: *anchor),
// which pipelines use everywhere: merged keys come first and the
// mapping's own keys override them.
func entries(d *yamlpos.Decoder, n ast.Node, field string, depth int) []yamlpos.Entry {
	if depth > yamlOptions.MaxDepth {
		d.Add(n, field, "nested deeper than %d levels", yamlOptions.MaxDepth)
		return nil
	}
	r := d.Resolve(n, field)
	var values []*ast.MappingValueNode
	switch v := r.(type) {
	case nil:
		return nil
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	default:
		d.Add(r, field, "must be a mapping, got %s", yamlpos.KindOf(r))
		return nil
	}
	var own, merged []yamlpos.Entry
	for _, mv := range values {
		if mv == nil {
			continue
		}
		if _, ok := mv.Key.(*ast.MergeKeyNode); ok {
			src := d.Resolve(mv.Value, field)
			if seq, ok := src.(*ast.SequenceNode); ok {
				for _, s := range seq.Values {
					merged = append(merged, entries(d, s, field, depth+1)...)
				}
			} else if src != nil {
				merged = append(merged, entries(d, src, field, depth+1)...)
			}
			continue
		}
		k := d.Resolve(mv.Key, field)
		var key string
		switch kv := k.(type) {
		case nil:
			continue
		case *ast.StringNode:
			key = kv.Value
		case *ast.IntegerNode, *ast.BoolNode, *ast.FloatNode, *ast.NullNode:
			key = kv.GetToken().Value
		default:
			d.Add(mv.Key, field, "keys must be strings, got %s", yamlpos.KindOf(k))
			continue
		}
		if slices.ContainsFunc(own, func(e yamlpos.Entry) bool { return e.Key == key }) {
			d.Add(mv.Key, yamlpos.Join(field, key), "duplicate key")
			continue
		}
		var value ast.Node = mv.Value
		if yamlpos.IsNull(value) {
			value = nil
		}
		own = append(own, yamlpos.Entry{Key: key, KeyNode: mv.Key, Value: value})
	}
	out := own
	for _, m := range merged {
		if !slices.ContainsFunc(out, func(e yamlpos.Entry) bool { return e.Key == m.Key }) {
			out = append(out, m)
		}
	}
	return out
}

// scalarText reads a GitLab scalar: strings, numbers and booleans are all
// strings to GitLab.
func scalarText(d *yamlpos.Decoder, n ast.Node, field string) (string, bool) {
	if _, ok := n.(*ast.TagNode); ok {
		d.Add(n, field, "a tag (!reference) is not supported here")
		return "", false
	}
	return scalar(d, n, field)
}

func (g *glImport) variables(d *yamlpos.Decoder, n ast.Node) {
	for _, e := range entries(d, n, "variables", 1) {
		f := yamlpos.Join("variables", e.Key)
		v := glVar{}
		if e.Value != nil {
			if r := d.Resolve(e.Value, f); r != nil {
				switch r.(type) {
				case *ast.MappingNode, *ast.MappingValueNode:
					for _, x := range entries(d, r, f, 2) {
						xf := yamlpos.Join(f, x.Key)
						switch x.Key {
						case "value":
							v.value, _ = scalarText(d, x.Value, xf)
						case "description":
							v.description, _ = scalarText(d, x.Value, xf)
							v.hasForm = true
						case "options":
							items, _ := d.List(x.Value, xf)
							for i, it := range items {
								if s, ok := scalarText(d, it, yamlpos.Index(xf, i)); ok {
									v.options = append(v.options, s)
								}
							}
						case "expand":
						default:
							d.Add(x.KeyNode, xf, "unknown variable key %q (known: description, expand, options, value)", x.Key)
						}
					}
				default:
					v.value, _ = scalarText(d, r, f)
				}
			}
		}
		if _, ok := g.vars[e.Key]; !ok {
			g.varList = append(g.varList, e.Key)
		}
		g.vars[e.Key] = v
	}
}

// jobs inventories every job of the merged pipeline.
func (g *glImport) jobs(mainFile string) {
	for _, name := range g.order {
		v := g.top[name]
		if glGlobal[name] {
			continue
		}
		if strings.HasPrefix(name, ".") {
			continue // a template: read through extends and !reference
		}
		switch v.d.Resolve(v.node, name).(type) {
		case *ast.MappingNode, *ast.MappingValueNode:
		case nil:
			continue
		default:
			v.d.Add(v.key, name, "a job must be a mapping; %q is not a keyword either", name)
			continue
		}
		g.job(mainFile, name, v)
	}
}

// merged is a job's keys after extends.
type merged map[string]glVal

// maxJobWork bounds the extends and !reference expansions of one job.
const maxJobWork = 10_000

// spend charges one expansion to the job's budget and reports the first
// overrun.
func (g *glImport) spend(d *yamlpos.Decoder, n ast.Node, field string) bool {
	g.work--
	if g.work >= 0 {
		return true
	}
	if !g.exhausted {
		g.exhausted = true
		d.Add(n, field, "job too large: more than %d expansions of extends and !reference", maxJobWork)
	}
	return false
}

func (g *glImport) extend(name string, v glVal, depth int, seen map[string]bool) merged {
	out := merged{}
	if !g.spend(v.d, v.key, name) {
		return out
	}
	if depth > maxExtendsDepth || seen[name] {
		v.d.Add(v.key, name+".extends", "extends is circular or deeper than %d levels", maxExtendsDepth)
		return out
	}
	seen[name] = true
	es := entries(v.d, v.node, name, 1)
	for _, e := range es {
		if e.Key != "extends" || e.Value == nil {
			continue
		}
		var parents []ast.Node
		if seq, ok := v.d.Resolve(e.Value, name+".extends").(*ast.SequenceNode); ok {
			parents = seq.Values
		} else {
			parents = []ast.Node{e.Value}
		}
		for i, pn := range parents {
			pname, ok := v.d.Str(pn, yamlpos.Index(name+".extends", i))
			if !ok {
				continue
			}
			pv, ok := g.top[pname]
			if !ok {
				v.d.Add(pn, name+".extends", "extends %q, which no file of the pipeline defines", pname)
				continue
			}
			for k, x := range g.extend(pname, pv, depth+1, seen) {
				if k == "variables" {
					if old, ok := out[k]; ok {
						x = mergeVars(old, x)
					}
				}
				out[k] = x
			}
		}
	}
	for _, e := range es {
		if e.Key == "extends" {
			continue
		}
		x := glVal{node: e.Value, key: e.KeyNode, d: v.d}
		if e.Key == "variables" {
			if old, ok := out[e.Key]; ok {
				x = mergeVars(old, x)
			}
		}
		out[e.Key] = x
	}
	delete(seen, name)
	return out
}

// mergeVars keeps both variable blocks of a job and its templates: the
// later one's keys win when the job is read.
func mergeVars(a, b glVal) glVal {
	b.prev = &a
	return b
}

func (g *glImport) job(mainFile, name string, v glVal) {
	g.work, g.exhausted = maxJobWork, false
	m := g.extend(name, v, 0, map[string]bool{})
	j := &Job{
		Key:      mainFile + "#" + name,
		File:     v.d.File,
		Line:     line(v.key),
		Column:   col(v.key),
		Workflow: g.src.display(mainFile),
		ID:       name,
		Env:      map[string]string{},
		kind:     KindGitLab,
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		if !glJobKeys[k] {
			x := m[k]
			x.d.Add(x.key, yamlpos.Join(name, k), "unknown job keyword %q", k)
		}
	}
	if _, ok := m["script"]; !ok {
		if _, trig := m["trigger"]; !trig {
			if _, run := m["run"]; !run {
				v.d.Add(v.key, name, "job has no script, run or trigger")
			}
		}
	}
	get := func(k string) (glVal, bool) {
		x, ok := m[k]
		return x, ok && x.node != nil
	}
	defaults := map[string]glVal{}
	if dv, ok := g.top["default"]; ok {
		for _, e := range entries(dv.d, dv.node, "default", 1) {
			defaults[e.Key] = glVal{node: e.Value, key: e.KeyNode, d: dv.d}
		}
	}
	// Legacy globals count as defaults.
	for _, k := range []string{"before_script", "image"} {
		if x, ok := g.top[k]; ok {
			if _, set := defaults[k]; !set {
				defaults[k] = x
			}
		}
	}
	orDefault := func(k string) (glVal, bool) {
		if x, ok := get(k); ok {
			return x, true
		}
		x, ok := defaults[k]
		return x, ok && x.node != nil
	}
	if x, ok := get("stage"); ok {
		j.Stage, _ = scalarText(x.d, x.node, name+".stage")
	} else {
		j.Stage = "test"
	}
	if x, ok := orDefault("image"); ok {
		if r := x.d.Resolve(x.node, name+".image"); r != nil {
			switch r.(type) {
			case *ast.MappingNode, *ast.MappingValueNode:
				for _, e := range entries(x.d, r, name+".image", 2) {
					if e.Key == "name" {
						j.Image, _ = scalarText(x.d, e.Value, name+".image.name")
					}
				}
			default:
				j.Image, _ = scalarText(x.d, r, name+".image")
			}
		}
	}
	if x, ok := orDefault("tags"); ok {
		items, _ := x.d.List(x.node, name+".tags")
		for i, it := range items {
			if s, ok := scalarText(x.d, it, yamlpos.Index(name+".tags", i)); ok {
				j.RunsOn = append(j.RunsOn, s)
			}
		}
	}
	if x, ok := orDefault("timeout"); ok {
		if s, ok := scalarText(x.d, x.node, name+".timeout"); ok {
			if mins, ok := glDuration(s); ok {
				j.TimeoutMinutes = mins
			} else {
				x.d.Add(x.node, name+".timeout", "cannot read duration %q", s)
			}
		}
	}
	if x, ok := get("needs"); ok {
		items, _ := x.d.List(x.node, name+".needs")
		for i, it := range items {
			f := yamlpos.Index(name+".needs", i)
			if r := x.d.Resolve(it, f); r != nil {
				if s, ok := r.(*ast.StringNode); ok {
					j.Needs = append(j.Needs, s.Value)
					continue
				}
				for _, e := range entries(x.d, r, f, 3) {
					if e.Key == "job" {
						s, _ := scalarText(x.d, e.Value, f+".job")
						j.Needs = append(j.Needs, s)
					}
				}
			}
		}
	}
	if x, ok := get("parallel"); ok {
		if r := x.d.Resolve(x.node, name+".parallel"); r != nil {
			if _, isInt := r.(*ast.IntegerNode); isInt {
				j.Matrix = append(j.Matrix, "parallel: "+r.GetToken().Value)
			} else {
				for _, e := range entries(x.d, r, name+".parallel", 2) {
					if e.Key != "matrix" {
						continue
					}
					items, _ := x.d.List(e.Value, name+".parallel.matrix")
					for i, it := range items {
						for _, ax := range entries(x.d, it, yamlpos.Index(name+".parallel.matrix", i), 3) {
							var vals []string
							if seq, ok := x.d.Resolve(ax.Value, ax.Key).(*ast.SequenceNode); ok {
								for _, sv := range seq.Values {
									s, _ := scalarText(x.d, sv, ax.Key)
									vals = append(vals, s)
								}
							} else if s, ok := scalarText(x.d, ax.Value, ax.Key); ok {
								vals = append(vals, s)
							}
							j.Matrix = append(j.Matrix, ax.Key+": "+strings.Join(vals, ", "))
						}
					}
				}
			}
		}
	}
	if x, ok := get("environment"); ok {
		if r := x.d.Resolve(x.node, name+".environment"); r != nil {
			switch r.(type) {
			case *ast.MappingNode, *ast.MappingValueNode:
				for _, e := range entries(x.d, r, name+".environment", 2) {
					if e.Key == "name" {
						j.Environment, _ = scalarText(x.d, e.Value, name+".environment.name")
					}
				}
			default:
				j.Environment, _ = scalarText(x.d, r, name+".environment")
			}
		}
	}

	// Variables: the pipeline's, then the job's (and its templates').
	jobVars := map[string]string{}
	if x, ok := get("variables"); ok {
		g.jobVariables(x, name, jobVars)
	}
	for _, k := range g.varList {
		if _, ok := jobVars[k]; !ok && !g.vars[k].hasForm {
			j.Env[k] = g.vars[k].value
		}
	}
	for k, val := range jobVars {
		j.Env[k] = val
	}

	// Script.
	var lines []glLine
	if x, ok := orDefault("before_script"); ok {
		lines = append(lines, g.script(x, name+".before_script", 0)...)
	}
	if x, ok := get("script"); ok {
		lines = append(lines, g.script(x, name+".script", 0)...)
	}
	for _, l := range lines {
		j.Steps = append(j.Steps, Step{Kind: StepRun, Run: l.text, script: l.text, File: l.file, Line: l.line, Column: l.col})
	}
	// Triggers, with the Run pipeline form's variables the script reads.
	refs := map[string]bool{}
	for _, st := range j.Steps {
		for _, m := range glVarRefRe.FindAllStringSubmatch(st.Run, -1) {
			refs[m[1]] = true
		}
	}
	j.Triggers = g.triggers(m, name, refs)
	if j.Image != "" {
		j.Notes = append(j.Notes, Error{File: j.File, Line: j.Line, Column: j.Column,
			Message: fmt.Sprintf(imageNote, j.Image)})
	}
	if x, ok := get("after_script"); ok {
		j.Notes = append(j.Notes, Error{File: x.d.File, Line: line(x.key), Column: col(x.key),
			Message: "after_script is not carried over; jobplane has no step that runs after a failure: add a trap to the script if it matters"})
	}
	if x, ok := get("trigger"); ok {
		j.Notes = append(j.Notes, Error{File: x.d.File, Line: line(x.key), Column: col(x.key),
			Message: "the job triggers a downstream pipeline; jobplane does not run pipelines"})
	}
	if x, ok := get("resource_group"); ok {
		if s, ok := scalarText(x.d, x.node, name+".resource_group"); ok {
			l, c := yamlpos.Position(x.node)
			j.Concurrency = &Concurrency{Group: s, Line: l, Column: c}
		}
	}
	if x, ok := get("secrets"); ok {
		for _, e := range entries(x.d, x.node, name+".secrets", 2) {
			j.Secrets = append(j.Secrets, e.Key)
			j.bindings = append(j.bindings, binding{Name: e.Key, Kind: bindSecret, Source: e.Key})
		}
		j.Notes = append(j.Notes, Error{File: x.d.File, Line: line(x.key), Column: col(x.key),
			Message: "secrets: came from an external secret manager as files by default; the connector gives the value itself, so check how the script reads it"})
	}
	g.bind(j, jobVars)
	if j.Concurrency != nil {
		j.leaseKey = g.leaseKey(j)
	}
	g.inv.Jobs = append(g.inv.Jobs, j)
}

func (g *glImport) jobVariables(x glVal, name string, out map[string]string) {
	if x.prev != nil {
		g.jobVariables(*x.prev, name, out)
	}
	for _, e := range entries(x.d, x.node, name+".variables", 2) {
		f := yamlpos.Join(name+".variables", e.Key)
		if e.Value == nil {
			out[e.Key] = ""
			continue
		}
		r := x.d.Resolve(e.Value, f)
		switch r.(type) {
		case *ast.MappingNode, *ast.MappingValueNode:
			for _, v := range entries(x.d, r, f, 3) {
				if v.Key == "value" {
					out[e.Key], _ = scalarText(x.d, v.Value, f+".value")
				}
			}
		default:
			out[e.Key], _ = scalarText(x.d, r, f)
		}
	}
}

// glLine is one line of a job's script, where it is written.
type glLine struct {
	text      string
	file      string
	line, col int
}

// script reads a script: a string, or a list of strings and nested lists
// (which !reference makes).
func (g *glImport) script(x glVal, field string, depth int) []glLine {
	if !g.spend(x.d, x.node, field) {
		return nil
	}
	if depth > maxExtendsDepth {
		x.d.Add(x.node, field, "!reference nested deeper than %d levels", maxExtendsDepth)
		return nil
	}
	if t, ok := x.node.(*ast.TagNode); ok {
		return g.reference(x, t, field, depth)
	}
	r := x.d.Resolve(x.node, field)
	switch v := r.(type) {
	case nil:
		return nil
	case *ast.SequenceNode:
		var out []glLine
		for i, it := range v.Values {
			out = append(out, g.script(glVal{node: it, key: x.key, d: x.d}, yamlpos.Index(field, i), depth)...)
		}
		return out
	default:
		s, ok := scalarText(x.d, r, field)
		if !ok {
			return nil
		}
		l, c := yamlpos.Position(r)
		return []glLine{{text: s, file: x.d.File, line: max(l, 1), col: max(c, 1)}}
	}
}

// reference resolves `!reference [job, key, ...]` against the pipeline.
func (g *glImport) reference(x glVal, t *ast.TagNode, field string, depth int) []glLine {
	if t.Start == nil || t.Start.Value != "!reference" {
		x.d.Add(t, field, "YAML tag %s is not supported", tagName(t))
		return nil
	}
	seq, ok := t.Value.(*ast.SequenceNode)
	if !ok || len(seq.Values) < 2 {
		x.d.Add(t, field, "!reference needs a list of a job and keys")
		return nil
	}
	var keys []string
	for i, it := range seq.Values {
		s, ok := x.d.Str(it, yamlpos.Index(field, i))
		if !ok {
			return nil
		}
		keys = append(keys, s)
	}
	cur, ok := g.top[keys[0]]
	if !ok {
		x.d.Add(t, field, "!reference names %q, which no file of the pipeline defines", keys[0])
		return nil
	}
	for _, k := range keys[1:] {
		found := false
		for _, e := range entries(cur.d, cur.node, keys[0], 2) {
			if e.Key == k && e.Value != nil {
				cur, found = glVal{node: e.Value, key: e.KeyNode, d: cur.d}, true
				break
			}
		}
		if !found {
			x.d.Add(t, field, "!reference %s: no key %q", strings.Join(keys, "."), k)
			return nil
		}
	}
	return g.script(cur, field, depth+1)
}

func tagName(t *ast.TagNode) string {
	if t.Start == nil {
		return "?"
	}
	return t.Start.Value
}

var (
	sourceRe      = regexp.MustCompile(`\$CI_PIPELINE_SOURCE\s*(==|=~)\s*["/]?([a-z_|]+)`)
	defaultRefRe  = regexp.MustCompile(`\$CI_COMMIT_(BRANCH|REF_NAME)\s*==\s*(\$CI_DEFAULT_BRANCH|["'][^"']+["'])`)
	glVarRefRe    = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	glAssignRe    = regexp.MustCompile(`(?m)(?:^|[;&|]\s*|\bexport\s+|\bread\s+(?:-\w+\s+)*)([A-Za-z_][A-Za-z0-9_]*)=`)
	secretNameRe  = regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSWORD|PASSWD|_PASS$|PRIVATE|CREDENTIAL|API_KEY|ACCESS_KEY|_KEY$|_DSN$|DATABASE_URL|DB_URL|WEBHOOK)`)
	glPredefined  = regexp.MustCompile(`^(CI|GITLAB|CHAT|FF)_`)
	shellBuiltins = map[string]bool{"HOME": true, "PATH": true, "PWD": true, "USER": true, "SHELL": true, "RANDOM": true, "HOSTNAME": true, "OLDPWD": true, "IFS": true, "LANG": true, "TMPDIR": true, "SECONDS": true, "LINENO": true, "UID": true}
)

// glSource maps $CI_PIPELINE_SOURCE values to trigger events.
var glSource = map[string]string{
	"schedule": "schedule", "web": "web", "push": "push", "merge_request_event": "merge_request",
	"api": "api", "trigger": "trigger", "pipeline": "trigger", "chat": "api", "external_pull_request_event": "pull_request",
	"parent_pipeline": "trigger",
}

// triggers reads rules:, only: and when: into the ways the job starts.
func (g *glImport) triggers(m merged, name string, refs map[string]bool) []Trigger {
	var out []Trigger
	add := func(t Trigger) {
		for _, o := range out {
			if o.Event == t.Event && o.Detail == t.Detail {
				return
			}
		}
		out = append(out, t)
	}
	jobWhen := ""
	if x, ok := m["when"]; ok && x.node != nil {
		jobWhen, _ = scalarText(x.d, x.node, name+".when")
	}
	if x, ok := m["rules"]; ok && x.node != nil {
		items, _ := x.d.List(x.node, name+".rules")
		for i, it := range items {
			f := yamlpos.Index(name+".rules", i)
			cond, when := "", jobWhen
			for _, e := range entries(x.d, it, f, 2) {
				switch e.Key {
				case "if":
					cond, _ = scalarText(x.d, e.Value, f+".if")
				case "when":
					when, _ = scalarText(x.d, e.Value, f+".when")
				case "changes", "exists", "allow_failure", "variables", "start_in", "needs", "interruptible", "auto_cancel":
				default:
					x.d.Add(e.KeyNode, yamlpos.Join(f, e.Key), "unknown rule keyword %q", e.Key)
				}
			}
			if when == "never" {
				continue
			}
			events := ruleEvents(cond)
			for _, ev := range events {
				if when == "manual" && ev != "schedule" {
					ev = "manual"
				}
				t := Trigger{Event: ev, Detail: cond}
				if ev == "push" {
					if b := defaultRefRe.FindStringSubmatch(cond); b != nil {
						br := strings.Trim(b[2], `"'`)
						if br == "$CI_DEFAULT_BRANCH" {
							br = "default branch"
						}
						t.Branches = []string{br}
					}
				}
				add(g.withInputs(t, refs))
			}
		}
		return out
	}
	if x, ok := m["only"]; ok && x.node != nil {
		for _, r := range onlyRefs(x, name) {
			ev := "push"
			switch r {
			case "schedules":
				ev = "schedule"
			case "web":
				ev = "web"
			case "merge_requests":
				ev = "merge_request"
			case "api", "triggers", "pipelines":
				ev = "api"
			case "tags":
				ev = "tag"
			}
			t := Trigger{Event: ev}
			if ev == "push" && r != "branches" {
				t.Branches = []string{r}
			}
			if jobWhen == "manual" && ev != "schedule" {
				t.Event = "manual"
			}
			add(g.withInputs(t, refs))
		}
		if len(out) > 0 {
			return out
		}
	}
	if jobWhen == "manual" {
		return []Trigger{g.withInputs(Trigger{Event: "manual"}, refs)}
	}
	return []Trigger{{Event: "push"}}
}

// ruleEvents reads which pipelines a rule's condition lets the job into.
func ruleEvents(cond string) []string {
	if cond == "" {
		return []string{"push"}
	}
	var out []string
	for _, m := range sourceRe.FindAllStringSubmatch(cond, -1) {
		if strings.Contains(cond, "!= ") && !strings.Contains(cond, "==") {
			continue
		}
		for _, s := range strings.Split(m[2], "|") {
			if ev, ok := glSource[s]; ok && !slices.Contains(out, ev) {
				out = append(out, ev)
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	switch {
	case strings.Contains(cond, "$CI_COMMIT_TAG"):
		return []string{"tag"}
	case strings.Contains(cond, "$CI_MERGE_REQUEST_"):
		return []string{"merge_request"}
	}
	return []string{"push"}
}

func onlyRefs(x glVal, name string) []string {
	r := x.d.Resolve(x.node, name+".only")
	var items []ast.Node
	switch v := r.(type) {
	case *ast.SequenceNode:
		items = v.Values
	case *ast.MappingNode, *ast.MappingValueNode:
		for _, e := range entries(x.d, v, name+".only", 2) {
			if e.Key == "refs" {
				items, _ = x.d.List(e.Value, name+".only.refs")
			}
		}
	default:
		if r != nil {
			items = []ast.Node{r}
		}
	}
	var out []string
	for i, it := range items {
		if s, ok := scalarText(x.d, it, yamlpos.Index(name+".only", i)); ok {
			out = append(out, s)
		}
	}
	return out
}

// withInputs gives a pipeline started from the Run pipeline form (web or
// manual) the form's prefilled variables that the job reads as inputs.
func (g *glImport) withInputs(t Trigger, refs map[string]bool) Trigger {
	if t.Event != "web" && t.Event != "manual" {
		return t
	}
	for _, k := range g.varList {
		v := g.vars[k]
		if !v.hasForm || !refs[k] {
			continue
		}
		p := Param{Name: k, Description: v.description, Type: "string", Options: v.options}
		val := v.value
		p.Default = &val
		if len(v.options) > 0 {
			p.Type = "choice"
		}
		t.Inputs = append(t.Inputs, p)
	}
	return t
}

// glPredefinedMap rewrites the predefined variables jobplane has an
// equivalent for.
var glPredefinedMap = map[string]string{
	"CI_COMMIT_SHA":       "${JOBPLANE_SOURCE_COMMIT}",
	"CI_JOB_ID":           "${" + protocol.EnvRunID + "}",
	"CI_PIPELINE_ID":      "${" + protocol.EnvRunID + "}",
	"CI_JOB_NAME":         "${" + protocol.EnvJob + "}",
	"CI_ENVIRONMENT_NAME": "${" + protocol.EnvChannel + "}",
	"CI_PROJECT_DIR":      "${PWD}",
}

// bind finds what the script reads that the pipeline does not set: the
// form's variables become parameters, secret-looking names connectors,
// the rest CI variables to fill in; predefined variables are mapped where
// jobplane has an equivalent.
func (g *glImport) bind(j *Job, jobVars map[string]string) {
	var text strings.Builder
	for _, s := range j.Steps {
		text.WriteString(s.Run + "\n")
	}
	if j.Concurrency != nil {
		text.WriteString(j.Concurrency.Group + "\n")
	}
	for _, v := range j.Env {
		text.WriteString(v + "\n")
	}
	all := text.String()
	assigned := map[string]bool{}
	for _, m := range glAssignRe.FindAllStringSubmatch(all, -1) {
		assigned[m[1]] = true
	}
	params := map[string]bool{}
	for _, in := range inputs(j) {
		params[in.Name] = true
	}
	var seen []string
	for _, m := range glVarRefRe.FindAllStringSubmatch(all, -1) {
		name := m[1]
		if slices.Contains(seen, name) {
			continue
		}
		seen = append(seen, name)
		_, inJob := jobVars[name]
		_, inEnv := j.Env[name]
		switch {
		case params[name]:
			j.bindings = append(j.bindings, binding{Name: name, Kind: bindParam, Source: name})
			j.exports = append(j.exports, fmt.Sprintf(`export %s="${%s}"`, name, paramEnv(name)))
		case inJob || inEnv || assigned[name] || shellBuiltins[name] || g.vars[name].hasForm:
		case glPredefinedMap[name] != "":
			j.exports = append(j.exports, fmt.Sprintf(`export %s="%s"`, name, glPredefinedMap[name]))
		case glPredefined.MatchString(name):
			j.Notes = append(j.Notes, Error{File: j.File, Line: j.Line, Column: j.Column,
				Message: fmt.Sprintf("reads predefined variable $%s, which jobplane does not set", name)})
		case slices.ContainsFunc(j.bindings, func(b binding) bool { return b.Name == name }):
		case secretNameRe.MatchString(name):
			j.Secrets = append(j.Secrets, name)
			j.bindings = append(j.bindings, binding{Name: name, Kind: bindSecret, Source: name})
		default:
			j.Variables = append(j.Variables, name)
			j.bindings = append(j.bindings, binding{Name: name, Kind: bindVar, Source: name})
		}
	}
	for _, b := range j.bindings {
		if b.Kind == bindSecret {
			j.exports = append(j.exports, fmt.Sprintf(`export %s="${%s}"`, b.Name, secretEnv(b.Source)))
		}
	}
	slices.Sort(j.exports)
	j.exports = slices.Compact(j.exports)
}

// leaseKey translates a resource_group into a lease key.
func (g *glImport) leaseKey(j *Job) string {
	c := j.Concurrency
	params := map[string]bool{}
	for _, in := range inputs(j) {
		params[in.Name] = true
	}
	// Literal text is cleaned, each variable becomes a placeholder; braces
	// written in the group are text, never placeholders.
	var b strings.Builder
	last := 0
	for _, loc := range glVarRefRe.FindAllStringSubmatchIndex(c.Group, -1) {
		b.WriteString(leaseLiteral(c.Group[last:loc[0]]))
		last = loc[1]
		name := c.Group[loc[2]:loc[3]]
		switch {
		case name == "CI_ENVIRONMENT_NAME" || name == "CI_COMMIT_REF_NAME" || name == "CI_COMMIT_BRANCH" || name == "CI_COMMIT_REF_SLUG":
			b.WriteString("{channel}")
		case name == "CI_JOB_NAME":
			b.WriteString("{job}")
		case params[name]:
			b.WriteString("{params." + name + "}")
		case j.Env[name] != "" && !strings.Contains(j.Env[name], "$"):
			b.WriteString(leaseLiteral(j.Env[name]))
		default:
			j.Notes = append(j.Notes, Error{File: j.File, Line: c.Line, Column: c.Column,
				Message: fmt.Sprintf("resource_group %q reads $%s, which has no lease placeholder; no lease is written, add one by hand", c.Group, name)})
			return ""
		}
	}
	b.WriteString(leaseLiteral(c.Group[last:]))
	return strings.Trim(b.String(), "-")
}

var glDurationRe = regexp.MustCompile(`(\d+(?:\.\d+)?)\s*(h|hr|hrs|hours?|m|min|mins|minutes?|s|sec|secs|seconds?|d|days?)\b`)

// glDuration reads GitLab's human durations: "1h 30m", "90 minutes",
// "2 hours", "3600" (seconds).
func glDuration(s string) (float64, bool) {
	s = strings.TrimSpace(strings.ToLower(s))
	if n, err := strconv.Atoi(s); err == nil {
		return math.Ceil(float64(n) / 60), n > 0
	}
	ms := glDurationRe.FindAllStringSubmatch(s, -1)
	if len(ms) == 0 {
		return 0, false
	}
	total := 0.0
	for _, m := range ms {
		n, _ := strconv.ParseFloat(m[1], 64)
		switch m[2][0] {
		case 'd':
			total += n * 24 * 60
		case 'h':
			total += n * 60
		case 'm':
			total += n
		case 's':
			total += n / 60
		}
	}
	return math.Ceil(total), total > 0
}

// fsGlob matches a local include pattern against the source, sorted.
func fsGlob(src Source, pattern string) ([]string, error) {
	matches, err := fs.Glob(src.FS, pattern)
	slices.Sort(matches)
	return matches, err
}
