package ciimport

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/rhysd/actionlint"

	"github.com/jobplane/jobplane/internal/protocol"
)

// maxInline bounds how deep composite actions and reusable workflows are
// followed: GitHub allows four levels of reusable workflows and ten of
// composite actions; a cycle stops here too.
const maxInline = 10

// GitHub inventories GitHub Actions workflows.
func GitHub(srcs []Source) *Inventory {
	inv := &Inventory{Kind: KindGitHub}
	for _, src := range srcs {
		// Two repositories have the same .github/workflows paths: with
		// more than one source, a key names the file as displayed (its
		// repository included), so that keys, overrides and the report
		// tell their jobs apart.
		g := &ghImport{src: src, inv: inv, parsed: map[string]*ghWorkflow{}, qualify: len(srcs) > 1}
		for _, f := range slices.Sorted(slices.Values(src.Files)) {
			g.workflow(f, true)
		}
		g.link()
	}
	inv.finish()
	return inv
}

type ghImport struct {
	src Source
	// qualify says job keys start with the source's prefix.
	qualify bool
	inv     *Inventory
	parsed  map[string]*ghWorkflow // by path in the source
	// jobs are the jobs inventoried, by workflow path then job id.
	jobs map[string]map[string]*Job
	// calls are the caller jobs to link once every workflow is read.
	calls []ghCall
}

type ghCall struct {
	job    *Job
	wf     *ghWorkflow
	ajob   *actionlint.Job
	target string
}

type ghWorkflow struct {
	path  string
	file  *srcFile
	w     *actionlint.Workflow
	name  string
	calls bool // has on: workflow_call
	// dispatch are the workflow_dispatch (or workflow_call) inputs.
	inputs []Param
}

// srcFile is a file's text, kept to place errors inside block scalars,
// where the parsers only know where the scalar starts.
type srcFile struct {
	display string
	lines   []string
}

func (g *ghImport) errorf(file string, line, col int, format string, args ...any) {
	g.inv.Errors = append(g.inv.Errors, Error{File: file, Line: max(line, 1), Column: max(col, 1), Message: fmt.Sprintf(format, args...)})
}

// read reads a file of the source, refusing what is not a regular file
// or is too large.
func read(fsys fs.FS, p string) ([]byte, error) {
	st, err := fs.Stat(fsys, p)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	return fs.ReadFile(fsys, p)
}

// workflow parses a workflow file once; inventoried says whether its jobs
// are listed (a reusable workflow named only by a caller is read for its
// steps, not listed).
func (g *ghImport) workflow(p string, inventoried bool) *ghWorkflow {
	if wf, ok := g.parsed[p]; ok {
		if inventoried && wf != nil && g.jobs[p] == nil {
			g.inventory(wf)
		}
		return wf
	}
	g.parsed[p] = nil
	display := g.src.display(p)
	data, err := read(g.src.FS, p)
	if err != nil {
		g.errorf(display, 1, 1, "cannot read: %s", readErr(err))
		return nil
	}
	if inventoried {
		g.inv.Files = append(g.inv.Files, display)
	}
	w, errs := parseWorkflow(data)
	for _, e := range errs {
		g.errorf(display, e.Line, e.Column, "%s", e.Message)
	}
	if w == nil {
		return nil
	}
	wf := &ghWorkflow{path: p, w: w, file: &srcFile{display: display, lines: strings.Split(string(data), "\n")}}
	wf.name = path.Base(p)
	if w.Name != nil && w.Name.Value != "" {
		wf.name = w.Name.Value
	}
	g.parsed[p] = wf
	if inventoried {
		g.inventory(wf)
	}
	return wf
}

// parseWorkflow runs actionlint's parser, which must not take the import
// down: a panic on hostile input becomes an error of the file.
func parseWorkflow(data []byte) (w *actionlint.Workflow, errs []*actionlint.Error) {
	defer func() {
		if r := recover(); r != nil {
			w, errs = nil, []*actionlint.Error{{Line: 1, Column: 1, Message: fmt.Sprintf("cannot parse workflow: %v", r)}}
		}
	}()
	return actionlint.Parse(data)
}

// pos places offset off of a string s the parser located at p: exact for
// plain scalars, and for block scalars (run: |) on the right line, at the
// column of the text in the file.
func (f *srcFile) pos(s *actionlint.String, off int) (int, int) {
	if s == nil || s.Pos == nil {
		return 1, 1
	}
	if !strings.Contains(s.Value, "\n") {
		col := s.Pos.Col + off
		if s.Quoted {
			col++
		}
		return s.Pos.Line, col
	}
	before := s.Value[:min(off, len(s.Value))]
	nl := strings.Count(before, "\n")
	line := s.Pos.Line + 1 + nl
	inLine := off - (strings.LastIndex(before, "\n") + 1)
	indent := 0
	if line-1 < len(f.lines) {
		src := f.lines[line-1]
		indent = len(src) - len(strings.TrimLeft(src, " "))
	}
	return line, indent + inLine + 1
}

// readErr says why a file cannot be read without repeating its path.
func readErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func str(s *actionlint.String) string {
	if s == nil {
		return ""
	}
	return s.Value
}

func (g *ghImport) inventory(wf *ghWorkflow) {
	if g.jobs == nil {
		g.jobs = map[string]map[string]*Job{}
	}
	g.jobs[wf.path] = map[string]*Job{}
	w := wf.w
	triggers := g.triggers(wf)
	ids := slices.SortedFunc(maps.Keys(w.Jobs), func(a, b string) int {
		ja, jb := w.Jobs[a], w.Jobs[b]
		return cmp.Or(comparePos(ja.Pos, jb.Pos), cmp.Compare(a, b))
	})
	for _, id := range ids {
		aj := w.Jobs[id]
		if aj == nil || aj.ID == nil {
			continue
		}
		keyPath := wf.path
		if g.qualify {
			keyPath = wf.file.display
		}
		j := &Job{
			Key:      keyPath + "#" + aj.ID.Value,
			File:     wf.file.display,
			Workflow: wf.name,
			ID:       aj.ID.Value,
			Name:     str(aj.Name),
			Triggers: triggers,
			Env:      map[string]string{},
			kind:     KindGitHub,
		}
		if aj.Pos != nil {
			j.Line, j.Column = aj.Pos.Line, aj.Pos.Col
		}
		for _, n := range aj.Needs {
			j.Needs = append(j.Needs, n.Value)
		}
		g.jobs[wf.path][strings.ToLower(aj.ID.Value)] = j
		g.inv.Jobs = append(g.inv.Jobs, j)
		g.describe(wf, aj, j)
		if aj.WorkflowCall != nil {
			g.calls = append(g.calls, ghCall{job: j, wf: wf, ajob: aj, target: str(aj.WorkflowCall.Uses)})
		}
	}
}

func comparePos(a, b *actionlint.Pos) int {
	if a == nil || b == nil {
		return 0
	}
	return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
}

func (g *ghImport) triggers(wf *ghWorkflow) []Trigger {
	var out []Trigger
	for _, ev := range wf.w.On {
		switch e := ev.(type) {
		case *actionlint.WebhookEvent:
			t := Trigger{Event: str(e.Hook)}
			if e.Branches != nil {
				for _, b := range e.Branches.Values {
					t.Branches = append(t.Branches, b.Value)
				}
			}
			if e.Tags != nil && len(e.Tags.Values) > 0 {
				for _, b := range e.Tags.Values {
					t.Branches = append(t.Branches, "tag:"+b.Value)
				}
			}
			for _, ty := range e.Types {
				t.Types = append(t.Types, ty.Value)
			}
			out = append(out, t)
		case *actionlint.ScheduledEvent:
			for _, s := range e.Schedules {
				out = append(out, Trigger{Event: "schedule", Cron: str(s.Cron), Timezone: str(s.Timezone)})
			}
		case *actionlint.WorkflowDispatchEvent:
			t := Trigger{Event: "workflow_dispatch"}
			names := slices.SortedFunc(maps.Keys(e.Inputs), func(a, b string) int {
				return cmp.Or(comparePos(inputPos(e.Inputs[a]), inputPos(e.Inputs[b])), cmp.Compare(a, b))
			})
			for _, k := range names {
				in := e.Inputs[k]
				p := Param{Name: str(in.Name), Description: str(in.Description), Type: dispatchType(in.Type)}
				if in.Required != nil {
					p.Required = in.Required.Value
				}
				if in.Default != nil {
					d := in.Default.Value
					p.Default = &d
				}
				for _, o := range in.Options {
					p.Options = append(p.Options, o.Value)
				}
				t.Inputs = append(t.Inputs, p)
			}
			wf.inputs = t.Inputs
			out = append(out, t)
		case *actionlint.RepositoryDispatchEvent:
			t := Trigger{Event: "repository_dispatch"}
			for _, ty := range e.Types {
				t.Types = append(t.Types, ty.Value)
			}
			out = append(out, t)
		case *actionlint.WorkflowCallEvent:
			wf.calls = true
			t := Trigger{Event: "workflow_call"}
			for _, in := range e.Inputs {
				p := Param{Name: str(in.Name), Description: str(in.Description), Type: callType(in.Type)}
				if in.Required != nil {
					p.Required = in.Required.Value
				}
				if in.Default != nil {
					d := in.Default.Value
					p.Default = &d
				}
				t.Inputs = append(t.Inputs, p)
			}
			out = append(out, t)
		default:
			out = append(out, Trigger{Event: ev.EventName()})
		}
	}
	return out
}

func inputPos(in *actionlint.DispatchInput) *actionlint.Pos {
	if in == nil || in.Name == nil {
		return nil
	}
	return in.Name.Pos
}

func dispatchType(t actionlint.WorkflowDispatchEventInputType) string {
	switch t {
	case actionlint.WorkflowDispatchEventInputTypeBoolean:
		return "boolean"
	case actionlint.WorkflowDispatchEventInputTypeNumber:
		return "number"
	case actionlint.WorkflowDispatchEventInputTypeChoice:
		return "choice"
	case actionlint.WorkflowDispatchEventInputTypeEnvironment:
		return "environment"
	}
	return "string"
}

func callType(t actionlint.WorkflowCallEventInputType) string {
	switch t {
	case actionlint.WorkflowCallEventInputTypeBoolean:
		return "boolean"
	case actionlint.WorkflowCallEventInputTypeNumber:
		return "number"
	}
	return "string"
}

// ghCtx is what the expressions of one string can refer to, and how each
// reference is rewritten for a jobplane script.
type ghCtx struct {
	g   *ghImport
	wf  *ghWorkflow
	job *Job
	// inputs rewrites inputs.X inside a composite action or a reusable
	// workflow: the caller's `with:` text. nil at the top level, where
	// inputs are the job's parameters.
	inputs map[string]string
	// secrets maps a reusable workflow's secret to the caller's secret
	// name; nil means the names are the caller's (top level or inherit).
	secrets map[string]string
	// depth counts the inlining levels.
	depth int
	// from names where inlined steps come from.
	from string
}

// rewrite returns s with every ${{ }} it can translate replaced by a shell
// expansion, records what the job reads, and notes (at their position)
// the expressions it leaves. asWord renders a whole value as one shell
// word instead (for environment variables set by the script).
func (c *ghCtx) rewrite(f *srcFile, s *actionlint.String, what string) string {
	if s == nil {
		return ""
	}
	spans, perr := findExprs(s.Value)
	if perr != nil {
		line, col := f.pos(s, perr.offset)
		c.g.errorf(f.display, line, col, "%s", perr.msg)
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s.Value[last:sp.start])
		last = sp.end
		rep, ok := c.resolve(sp)
		if !ok {
			line, col := f.pos(s, sp.start)
			c.note(f, line, col, "%s: ${{ %s }} is not translated; the script keeps it and fails until it is replaced", what, sp.text)
			b.WriteString(s.Value[sp.start:sp.end])
			continue
		}
		b.WriteString(rep)
	}
	b.WriteString(s.Value[last:])
	return b.String()
}

// word renders a value (an env entry's) as one shell word.
func (c *ghCtx) word(f *srcFile, s *actionlint.String, what string) string {
	if s == nil {
		return "''"
	}
	spans, perr := findExprs(s.Value)
	if perr != nil {
		line, col := f.pos(s, perr.offset)
		c.g.errorf(f.display, line, col, "%s", perr.msg)
	}
	var parts []wordPart
	last := 0
	for _, sp := range spans {
		parts = append(parts, wordPart{text: s.Value[last:sp.start], literal: true})
		last = sp.end
		rep, ok := c.resolve(sp)
		if !ok {
			line, col := f.pos(s, sp.start)
			c.note(f, line, col, "%s: ${{ %s }} is not translated; the script keeps it and fails until it is replaced", what, sp.text)
			parts = append(parts, wordPart{text: s.Value[sp.start:sp.end]})
			continue
		}
		parts = append(parts, wordPart{text: rep, literal: !strings.HasPrefix(rep, "${")})
	}
	parts = append(parts, wordPart{text: s.Value[last:], literal: true})
	return shellWord(parts)
}

func (c *ghCtx) note(f *srcFile, line, col int, format string, args ...any) {
	c.job.Notes = append(c.job.Notes, Error{File: f.display, Line: line, Column: col, Message: fmt.Sprintf(format, args...)})
}

// collect records the secrets and variables any expression of s reads,
// translated or not: the inventory lists them all.
func (c *ghCtx) collect(s *actionlint.String) {
	if s == nil {
		return
	}
	spans, _ := findExprs(s.Value)
	for _, sp := range spans {
		for _, p := range exprRefs(sp.node) {
			switch kind, name := refKind(spelled(sp.text, p)); kind {
			case "secret":
				c.addSecret(name)
			case "var":
				c.job.Variables = append(c.job.Variables, name)
			}
		}
	}
}

func (c *ghCtx) addSecret(name string) {
	if c.secrets != nil {
		caller, ok := c.secrets[strings.ToLower(name)]
		if !ok {
			return // not passed by the caller: empty in GitHub too
		}
		name = caller
	}
	c.job.Secrets = append(c.job.Secrets, name)
}

// resolve translates one ${{ }} that is a plain reference.
func (c *ghCtx) resolve(sp exprSpan) (string, bool) {
	p := exprPath(sp.node)
	if p == nil {
		return "", false
	}
	p = spelled(sp.text, p)
	kind, name := refKind(p)
	switch kind {
	case "input":
		if c.inputs != nil {
			v, ok := c.inputs[strings.ToLower(name)]
			return v, ok
		}
		for _, in := range c.wf.inputs {
			if strings.EqualFold(in.Name, name) {
				env := protocol.ParamEnvName(in.Name)
				c.job.bindings = append(c.job.bindings, binding{Name: env, Kind: bindParam, Source: in.Name})
				return "${" + env + "}", true
			}
		}
		return "", false
	case "secret":
		if strings.EqualFold(name, "GITHUB_TOKEN") {
			return "", false
		}
		if c.secrets != nil {
			caller, ok := c.secrets[strings.ToLower(name)]
			if !ok {
				return "", true // GitHub gives an empty string for a secret not passed
			}
			name = caller
		}
		env := secretEnv(name)
		c.job.bindings = append(c.job.bindings, binding{Name: env, Kind: bindSecret, Source: name})
		return "${" + env + "}", true
	case "var":
		c.job.bindings = append(c.job.bindings, binding{Name: name, Kind: bindVar, Source: name})
		return "${" + name + "}", true
	case "env":
		return "${" + name + "}", true
	}
	if len(p) == 2 && p[0] == "github" {
		switch strings.ToLower(p[1]) {
		case "run_id":
			return "${" + protocol.EnvRunID + "}", true
		case "job":
			return "${" + protocol.EnvJob + "}", true
		case "sha":
			return "${JOBPLANE_SOURCE_COMMIT}", true
		case "workflow":
			return c.wf.name, true
		}
	}
	return "", false
}

// leaseKey translates a concurrency group into a lease key: the inputs
// become {params.X}, the branch becomes the channel (a jobplane job runs
// per channel), and anything unique per run, which excluded nothing in
// GitHub either, drops the lease.
func (c *ghCtx) leaseKey(f *srcFile, s *actionlint.String) string {
	spans, perr := findExprs(s.Value)
	if perr != nil {
		return ""
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(leaseLiteral(s.Value[last:sp.start]))
		last = sp.end
		p := spelled(sp.text, exprPath(sp.node))
		kind, name := refKind(p)
		switch {
		case p == nil:
		case kind == "input" && c.inputs == nil && c.hasInput(name):
			b.WriteString("{params." + c.inputName(name) + "}")
			continue
		case len(p) == 2 && p[0] == "github":
			switch strings.ToLower(p[1]) {
			case "workflow":
				b.WriteString(leaseLiteral(slug(c.wf.name, 40)))
				continue
			case "job":
				b.WriteString("{job}")
				continue
			case "ref", "ref_name", "head_ref", "base_ref":
				b.WriteString("{channel}")
				continue
			case "run_id", "run_number", "run_attempt", "sha":
				line, col := f.pos(s, sp.start)
				c.note(f, line, col, "concurrency group %q is unique per run, so it excluded nothing; no lease is written", s.Value)
				return ""
			}
		}
		line, col := f.pos(s, sp.start)
		c.note(f, line, col, "concurrency group %q: ${{ %s }} has no lease placeholder; no lease is written, add one by hand", s.Value, sp.text)
		return ""
	}
	b.WriteString(leaseLiteral(s.Value[last:]))
	return strings.Trim(b.String(), "-")
}

func (c *ghCtx) hasInput(name string) bool {
	return c.inputName(name) != ""
}

func (c *ghCtx) inputName(name string) string {
	for _, in := range c.wf.inputs {
		if strings.EqualFold(in.Name, name) {
			return in.Name
		}
	}
	return ""
}

// leaseLiteral keeps the characters a lease key allows and turns the
// others into '-'.
func leaseLiteral(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == ':' || ch == '.' || ch == '_' || ch == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

// secretEnv is the variable a secret's connector value arrives in.
func secretEnv(secret string) string {
	return connectorEnv(connectorName(secret))
}

// describe fills a job from its definition.
func (g *ghImport) describe(wf *ghWorkflow, aj *actionlint.Job, j *Job) {
	c := &ghCtx{g: g, wf: wf, job: j}
	f := wf.file
	w := wf.w
	if aj.RunsOn != nil {
		for _, l := range aj.RunsOn.Labels {
			c.collect(l)
			j.RunsOn = append(j.RunsOn, l.Value)
		}
		if aj.RunsOn.LabelsExpr != nil {
			c.collect(aj.RunsOn.LabelsExpr)
			j.RunsOn = append(j.RunsOn, aj.RunsOn.LabelsExpr.Value)
		}
		if aj.RunsOn.Group != nil {
			j.RunsOn = append(j.RunsOn, "group:"+aj.RunsOn.Group.Value)
		}
	}
	if aj.Environment != nil && aj.Environment.Name != nil {
		c.collect(aj.Environment.Name)
		j.Environment = aj.Environment.Name.Value
	}
	conc := aj.Concurrency
	if conc == nil {
		conc = w.Concurrency
	}
	if conc != nil && conc.Group != nil {
		c.collect(conc.Group)
		j.Concurrency = &Concurrency{Group: conc.Group.Value}
		if conc.Group.Pos != nil {
			j.Concurrency.Line, j.Concurrency.Column = conc.Group.Pos.Line, conc.Group.Pos.Col
		}
		if conc.CancelInProgress != nil {
			j.Concurrency.CancelInProgress = conc.CancelInProgress.Value
		}
	}
	if j.Concurrency != nil {
		j.leaseKey = c.leaseKey(f, conc.Group)
	}
	if aj.TimeoutMinutes != nil {
		j.TimeoutMinutes = aj.TimeoutMinutes.Value
	}
	if aj.Strategy != nil && aj.Strategy.Matrix != nil {
		m := aj.Strategy.Matrix
		if m.Expression != nil {
			j.Matrix = append(j.Matrix, "(expression) "+m.Expression.Value)
		}
		for _, name := range slices.Sorted(maps.Keys(m.Rows)) {
			row := m.Rows[name]
			var vals []string
			for _, v := range row.Values {
				vals = append(vals, v.String())
			}
			if row.Expression != nil {
				vals = append(vals, row.Expression.Value)
			}
			j.Matrix = append(j.Matrix, str(row.Name)+": "+strings.Join(vals, ", "))
		}
		if m.Include != nil && len(m.Include.Combinations) > 0 {
			j.Matrix = append(j.Matrix, fmt.Sprintf("include: %d combinations", len(m.Include.Combinations)))
		}
	}
	if aj.Container != nil && aj.Container.Image != nil {
		c.collect(aj.Container.Image)
		j.Image = aj.Container.Image.Value
		line, col := f.pos(aj.Container.Image, 0)
		c.note(f, line, col, imageNote, j.Image)
	}
	// Workflow, then job environment: the job's wins.
	g.env(c, f, w.Env, aj.Env)
	if aj.If != nil {
		c.collect(aj.If)
		j.Notes = append(j.Notes, Error{File: f.display, Line: posLine(aj.If.Pos), Column: posCol(aj.If.Pos),
			Message: fmt.Sprintf("the job runs only if `%s`; jobplane runs it whenever it is requested", aj.If.Value)})
	}
	for _, s := range aj.Steps {
		g.step(c, f, s, &j.Steps)
	}
	if aj.Services != nil && len(aj.Services.Value) > 0 {
		j.Notes = append(j.Notes, Error{File: f.display, Line: posLine(aj.Services.Pos), Column: posCol(aj.Services.Pos),
			Message: fmt.Sprintf("service containers (%s) are not started by jobplane; the runner must provide them", strings.Join(slices.Sorted(maps.Keys(aj.Services.Value)), ", "))})
	}
}

// env records literal environment variables in the job's env and turns
// the ones computed by expressions into exports of the script.
func (g *ghImport) env(c *ghCtx, f *srcFile, envs ...*actionlint.Env) {
	j := c.job
	for _, env := range envs {
		if env == nil {
			continue
		}
		if env.Expression != nil {
			c.collect(env.Expression)
			line, col := f.pos(env.Expression, 0)
			c.note(f, line, col, "env is an expression (%s); set the variables in run.env by hand", env.Expression.Value)
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(env.Vars)) {
			v := env.Vars[k]
			c.collect(v.Value)
			name := str(v.Name)
			if v.Value != nil && strings.Contains(v.Value.Value, "${{") {
				delete(j.Env, name)
				j.exports = append(j.exports, "export "+name+"="+c.word(f, v.Value, "env "+name))
				continue
			}
			j.Env[name] = str(v.Value)
		}
	}
}

func posLine(p *actionlint.Pos) int {
	if p == nil {
		return 1
	}
	return p.Line
}

func posCol(p *actionlint.Pos) int {
	if p == nil {
		return 1
	}
	return p.Col
}

// step appends one workflow step (or the steps of the composite action it
// uses) to out.
func (g *ghImport) step(c *ghCtx, f *srcFile, s *actionlint.Step, out *[]Step) {
	if s == nil || s.Exec == nil {
		return
	}
	st := Step{Name: str(s.Name), File: f.display, Line: posLine(s.Pos), Column: posCol(s.Pos), From: c.from}
	if s.If != nil {
		c.collect(s.If)
		st.If = s.If.Value
	}
	if s.Env != nil {
		if s.Env.Expression != nil {
			c.collect(s.Env.Expression)
			c.note(f, posLine(s.Pos), posCol(s.Pos), "step env is an expression (%s); set the variables by hand", s.Env.Expression.Value)
		}
		for _, k := range slices.Sorted(maps.Keys(s.Env.Vars)) {
			v := s.Env.Vars[k]
			c.collect(v.Value)
			st.Env = append(st.Env, KV{Name: str(v.Name), Value: c.word(f, v.Value, "env "+str(v.Name))})
		}
	}
	switch e := s.Exec.(type) {
	case *actionlint.ExecRun:
		st.Kind = StepRun
		c.collect(e.Run)
		st.Run = str(e.Run)
		st.script = c.rewrite(f, e.Run, "run")
		st.Shell = str(e.Shell)
		st.Dir = str(e.WorkingDirectory)
		if e.Run != nil && e.Run.Pos != nil {
			st.Line, st.Column = e.Run.Pos.Line, e.Run.Pos.Col
		}
		*out = append(*out, st)
	case *actionlint.ExecAction:
		st.Kind = StepUses
		st.Uses = str(e.Uses)
		if e.Uses != nil && e.Uses.Pos != nil {
			st.Line, st.Column = e.Uses.Pos.Line, e.Uses.Pos.Col
		}
		with := map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(e.Inputs)) {
			in := e.Inputs[k]
			c.collect(in.Value)
			st.With = append(st.With, KV{Name: str(in.Name), Value: str(in.Value)})
			with[k] = c.rewrite(f, in.Value, "with "+str(in.Name))
		}
		if strings.HasPrefix(st.Uses, "./") && c.depth < maxInline {
			if g.composite(c, st, with, out) {
				return
			}
		}
		*out = append(*out, st)
	}
}

// composite inlines the run steps of a local composite action; it returns
// false when the action cannot be read (the step is then kept as a TODO).
func (g *ghImport) composite(c *ghCtx, st Step, with map[string]string, out *[]Step) bool {
	dir := path.Clean(strings.TrimPrefix(st.Uses, "./"))
	var meta *action
	var file string
	for _, name := range []string{"action.yml", "action.yaml"} {
		p := path.Join(dir, name)
		data, err := read(g.src.FS, p)
		if err != nil {
			continue
		}
		file = g.src.display(p)
		var errs []Error
		meta, errs = parseAction(file, data)
		g.inv.Errors = append(g.inv.Errors, errs...)
		break
	}
	if meta == nil {
		if file == "" {
			c.note(&srcFile{display: st.File}, st.Line, st.Column, "uses %s: no action.yml there to inline", st.Uses)
		}
		return false
	}
	if meta.using != "composite" {
		c.note(&srcFile{display: st.File}, st.Line, st.Column, "uses %s: a %s action is not inlined; only composite actions are", st.Uses, cmp.Or(meta.using, "non-composite"))
		return false
	}
	inputs := map[string]string{}
	for _, in := range meta.inputs {
		if v, ok := with[strings.ToLower(in.Name)]; ok {
			inputs[strings.ToLower(in.Name)] = v
		} else if in.Default != nil {
			inputs[strings.ToLower(in.Name)] = *in.Default
		} else {
			inputs[strings.ToLower(in.Name)] = ""
		}
	}
	sub := &ghCtx{g: g, wf: c.wf, job: c.job, inputs: inputs, secrets: c.secrets, depth: c.depth + 1, from: st.Uses}
	f := &srcFile{display: file, lines: meta.lines}
	for _, s := range meta.steps {
		g.step(sub, f, s, out)
	}
	return true
}

// link resolves reusable workflow calls once every workflow of the source
// is read: the caller gets the called jobs' steps and secrets, the called
// jobs learn who calls them.
func (g *ghImport) link() {
	for _, call := range g.calls {
		j := call.job
		j.Calls = call.target
		target, ok := strings.CutPrefix(call.target, "./")
		if !ok {
			j.Notes = append(j.Notes, Error{File: j.File, Line: j.Line, Column: j.Column,
				Message: fmt.Sprintf("calls %s, a workflow of another repository: not inlined; move its steps by hand", call.target)})
			continue
		}
		target = path.Clean(target)
		wf := g.workflow(target, false)
		if wf == nil {
			j.Notes = append(j.Notes, Error{File: j.File, Line: j.Line, Column: j.Column,
				Message: fmt.Sprintf("calls %s, which cannot be read", call.target)})
			continue
		}
		wc := call.ajob.WorkflowCall
		c := &ghCtx{g: g, wf: call.wf, job: j}
		inputs := map[string]string{}
		for _, in := range wf.callInputs() {
			if in.Default != nil {
				inputs[strings.ToLower(in.Name)] = *in.Default
			} else {
				inputs[strings.ToLower(in.Name)] = ""
			}
		}
		for k, in := range wc.Inputs {
			c.collect(in.Value)
			inputs[k] = c.rewrite(call.wf.file, in.Value, "with "+str(in.Name))
		}
		var secrets map[string]string
		if !wc.InheritSecrets {
			secrets = map[string]string{}
			for k, s := range wc.Secrets {
				c.collect(s.Value)
				// Only a plain secrets.X passes on by name; anything else
				// arrives as a value the connector cannot name.
				if spans, _ := findExprs(str(s.Value)); len(spans) == 1 {
					if kind, name := refKind(spelled(spans[0].text, exprPath(spans[0].node))); kind == "secret" {
						secrets[k] = name
						continue
					}
				}
				c.note(call.wf.file, posLine(s.Name.Pos), posCol(s.Name.Pos), "secret %s is passed as %q, not a plain secret; set it by hand", str(s.Name), str(s.Value))
			}
		}
		sub := &ghCtx{g: g, wf: call.wf, job: j, inputs: inputs, secrets: secrets, depth: 1}
		ids := slices.SortedFunc(maps.Keys(wf.w.Jobs), func(a, b string) int {
			return cmp.Or(comparePos(wf.w.Jobs[a].Pos, wf.w.Jobs[b].Pos), cmp.Compare(a, b))
		})
		for _, id := range ids {
			aj := wf.w.Jobs[id]
			if aj == nil || aj.ID == nil {
				continue
			}
			sub.from = target + "#" + aj.ID.Value
			if callee := g.jobs[target][strings.ToLower(aj.ID.Value)]; callee != nil {
				callee.CalledBy = append(callee.CalledBy, j.Key)
			}
			if j.Environment == "" && aj.Environment != nil && aj.Environment.Name != nil {
				j.Environment = rewriteLiteral(sub, wf.file, aj.Environment.Name)
			}
			if j.Concurrency == nil && aj.Concurrency != nil && aj.Concurrency.Group != nil {
				j.Concurrency = &Concurrency{Group: aj.Concurrency.Group.Value, Line: posLine(aj.Concurrency.Group.Pos), Column: posCol(aj.Concurrency.Group.Pos)}
				if aj.Concurrency.CancelInProgress != nil {
					j.Concurrency.CancelInProgress = aj.Concurrency.CancelInProgress.Value
				}
			}
			if len(j.RunsOn) == 0 && aj.RunsOn != nil {
				for _, l := range aj.RunsOn.Labels {
					j.RunsOn = append(j.RunsOn, l.Value)
				}
			}
			g.env(sub, wf.file, wf.w.Env, aj.Env)
			for _, s := range aj.Steps {
				g.step(sub, wf.file, s, &j.Steps)
			}
		}
	}
}

// rewriteLiteral resolves a called workflow's environment name when it is
// the caller's input.
func rewriteLiteral(c *ghCtx, f *srcFile, s *actionlint.String) string {
	spans, _ := findExprs(s.Value)
	if len(spans) == 1 && spans[0].start == 0 && spans[0].end == len(s.Value) {
		if kind, name := refKind(spelled(spans[0].text, exprPath(spans[0].node))); kind == "input" {
			if v, ok := c.inputs[strings.ToLower(name)]; ok && !strings.Contains(v, "${") {
				return v
			}
		}
	}
	return s.Value
}

func (wf *ghWorkflow) callInputs() []Param {
	for _, ev := range wf.w.On {
		if e, ok := ev.(*actionlint.WorkflowCallEvent); ok {
			var out []Param
			for _, in := range e.Inputs {
				p := Param{Name: str(in.Name)}
				if in.Default != nil {
					d := in.Default.Value
					p.Default = &d
				}
				out = append(out, p)
			}
			return out
		}
	}
	return nil
}
