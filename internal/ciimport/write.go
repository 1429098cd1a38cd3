package ciimport

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/robfig/cron/v3"

	"github.com/jobplane/jobplane/internal/protocol"
)

// Plan is the definitions repository written for an inventory, and what
// the report says about each job.
type Plan struct {
	// Files are the repository's files by slash-separated path.
	Files map[string][]byte
	// Moves are the jobs written, in inventory order.
	Moves []*Move
	// Channels are the channels the policies name, sorted.
	Channels []Channel
	// Secrets are the long-lived CI secrets, with the jobs reading them.
	Secrets []SecretUse
	// Placeholders says the groups still have example members.
	Placeholders bool
	Overrides    *Overrides
}

// Move is one job written to the definitions repository.
type Move struct {
	Job      *Job
	Name     string // the jobplane job
	Channels []Channel
	// Moved and Left are sentences for the report.
	Moved []string
	Left  []string
	// Connectors are the connectors the job declares.
	Connectors []string
}

// Channel is a channel of the written policies.
type Channel struct {
	Name     string `json:"name"`
	Approval int    `json:"approval"`
	// Environment is the CI environment it stands for ("" for the
	// default channel).
	Environment string `json:"environment,omitempty"`
}

// SecretUse is a long-lived CI secret and who reads it.
type SecretUse struct {
	Name string `json:"name"`
	// Jobs are job keys; Connector is set when the moved jobs read it
	// through a connector stub.
	Jobs      []SecretReader `json:"jobs"`
	Connector string         `json:"connector,omitempty"`
}

// SecretReader is one job reading a secret, and whether it moved.
type SecretReader struct {
	Key   string `json:"key"`
	Moves bool   `json:"moves"`
}

// ephemeralSecrets are minted per run by the CI itself: not long-lived.
var ephemeralSecrets = map[string]bool{"GITHUB_TOKEN": true, "CI_JOB_TOKEN": true}

// Write plans the definitions repository for the jobs that move.
func Write(inv *Inventory, ov *Overrides) *Plan {
	p := &Plan{Files: map[string][]byte{}, Overrides: ov}
	used := map[string]bool{}
	conns := map[string]map[string]bool{} // connector → channels
	connSecret := map[string]string{}
	for _, j := range inv.Jobs {
		if !j.Moves() {
			continue
		}
		m := &Move{Job: j, Name: jobName(j, ov, used)}
		p.Moves = append(p.Moves, m)
		p.job(m, ov)
		for _, c := range m.Connectors {
			if conns[c] == nil {
				conns[c] = map[string]bool{}
			}
			for _, ch := range m.Channels {
				conns[c][ch.Name] = true
			}
		}
		for _, b := range j.bindings {
			if b.Kind == bindSecret {
				connSecret[connectorName(b.Source)] = b.Source
			}
		}
	}
	p.ordering(inv)
	channels := map[string]Channel{}
	for _, m := range p.Moves {
		for _, ch := range m.Channels {
			channels[ch.Name] = ch
		}
	}
	for _, name := range slices.Sorted(maps.Keys(channels)) {
		p.Channels = append(p.Channels, channels[name])
	}
	for _, c := range slices.Sorted(maps.Keys(conns)) {
		p.Files["connectors/"+c+".yaml"] = connectorFile(c, connSecret[c], slices.Sorted(maps.Keys(conns[c])))
	}
	p.secrets(inv, connSecret)
	if len(p.Moves) > 0 {
		p.Files["groups.yaml"] = p.groups(ov)
	}
	p.Files[ReportFile] = []byte(Report(inv, p))
	for name, b := range p.Files {
		p.Files[name] = append([]byte(markerLine(name)), b...)
	}
	return p
}

// ordering says what a moved job loses of the CI's ordering and fan-out:
// the jobs it waited for (needs:) and the matrix it ran as. jobplane runs
// each job on its own, once per request, so a job that waited for another
// would start without it, and a matrix would run one combination's worth.
func (p *Plan) ordering(inv *Inventory) {
	names := map[string]string{} // job key → jobplane name
	for _, m := range p.Moves {
		names[m.Job.Key] = m.Name
	}
	keys := map[string]bool{}
	for _, j := range inv.Jobs {
		keys[j.Key] = true
	}
	for _, m := range p.Moves {
		j := m.Job
		// The key is the workflow's key path, '#', the job's id.
		prefix := strings.TrimSuffix(j.Key, "#"+j.ID)
		for _, need := range j.Needs {
			key := prefix + "#" + need
			switch name, moved := names[key]; {
			case moved:
				m.Left = append(m.Left, fmt.Sprintf("ran after %s in the CI (needs: %s), which becomes job %s; jobplane does not chain jobs, so this one no longer waits for it: schedule it after %s ends, or have %s request it as its last step", key, need, name, name, name))
			case keys[key]:
				m.Left = append(m.Left, fmt.Sprintf("ran after %s in the CI (needs: %s), which stays in CI; jobplane does not wait for it: make sure what it produced exists before a run", key, need))
			default:
				m.Left = append(m.Left, fmt.Sprintf("ran after %s in the CI (needs: %s), a job the inventory does not hold; jobplane does not wait for it", need, need))
			}
		}
		if len(j.Matrix) > 0 {
			m.Left = append(m.Left, fmt.Sprintf("ran as a matrix (%s); jobplane runs it once per request: make the axis a parameter and request one run per value", strings.Join(j.Matrix, "; ")))
		}
	}
}

// imageNote is what a job that ran in a CI image is told.
const imageNote = "ran in image %s; jobplane runs the script on the runner's host unless the job names run.image (written commented out): give the runner its tools, or uncomment run.image so that a container or Kubernetes runner runs it there (the image needs bash)"

// marker opens every file the import writes, so that a later import knows
// which files it may replace.
const marker = "Generated by jobplane import; importing again replaces this file."

func markerLine(name string) string {
	if strings.HasSuffix(name, ".md") {
		return "<!-- " + marker + " -->\n"
	}
	return "# " + marker + "\n"
}

// Generated reports whether a file was written by the import (its first
// line is the marker), and so may be replaced by the next one.
func Generated(data []byte) bool {
	first, _, _ := strings.Cut(string(data), "\n")
	return strings.Contains(first, marker)
}

// jobName picks a unique definitions name: the override, else the job id,
// else the workflow file and the id.
func jobName(j *Job, ov *Overrides, used map[string]bool) string {
	if o, ok := ov.job(j); ok && o.Name != "" && !used[o.Name] {
		used[o.Name] = true
		return o.Name
	}
	base := cmp.Or(slug(j.ID, 50), "job")
	if used[base] {
		file := strings.TrimSuffix(strings.TrimSuffix(path.Base(j.File), ".yml"), ".yaml")
		base = cmp.Or(slug(file+"-"+j.ID, 50), "job")
	}
	name := base
	for i := 2; used[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	used[name] = true
	return name
}

// channels maps the job's environment to the channels it runs in.
func channels(j *Job, ov *Overrides) ([]Channel, []string) {
	var left []string
	env := j.Environment
	mk := func(env string) Channel {
		ch := Channel{Name: cmp.Or(slug(env, 63), ov.channel()), Approval: 1, Environment: env}
		if ov != nil {
			if eo, ok := ov.Environments[env]; ok {
				if eo.Channel != "" {
					ch.Name = eo.Channel
				}
				if eo.set {
					ch.Approval = eo.Approval
				}
			}
		}
		return ch
	}
	switch {
	case env == "":
		return []Channel{{Name: ov.channel()}}, nil
	case strings.Contains(env, "${{") || strings.HasPrefix(env, "$"):
		// An environment chosen by an input is a channel chosen by the
		// request: one rule per choice.
		if in := envInput(j); in != nil && len(in.Options) > 0 {
			var out []Channel
			for _, o := range in.Options {
				out = append(out, mk(o))
			}
			left = append(left, fmt.Sprintf("the environment was chosen by input %s; it is now the run's channel (one rule per choice), so drop the parameter from the script once it reads $JOBPLANE_CHANNEL", in.Name))
			return out, left
		}
		left = append(left, fmt.Sprintf("the environment is computed (%s); the job is allowed in channel %s only until you name its channels", env, ov.channel()))
		return []Channel{{Name: ov.channel(), Approval: 1}}, left
	}
	return []Channel{mk(env)}, nil
}

var envInputRe = regexp.MustCompile(`^\$\{\{\s*(?:github\.event\.)?inputs\.([A-Za-z0-9_-]+)\s*\}\}$`)

func envInput(j *Job) *Param {
	m := envInputRe.FindStringSubmatch(j.Environment)
	if m == nil {
		return nil
	}
	for _, t := range j.Triggers {
		for i, in := range t.Inputs {
			if strings.EqualFold(in.Name, m[1]) {
				return &t.Inputs[i]
			}
		}
	}
	return nil
}

func inputsEvent(j *Job) string {
	for _, t := range j.Triggers {
		if len(t.Inputs) > 0 && t.Event != "workflow_call" {
			return t.Event
		}
	}
	return ""
}

// inputs are the parameters of the job: its manual trigger's inputs.
func inputs(j *Job) []Param {
	for _, t := range j.Triggers {
		if len(t.Inputs) > 0 && t.Event != "workflow_call" {
			return t.Inputs
		}
	}
	return nil
}

func (j *Job) hasTrigger(events ...string) bool {
	for _, t := range j.Triggers {
		if slices.Contains(events, t.Event) {
			return true
		}
	}
	return false
}

// requested says people may request the job: anything but a schedule
// started it (a scheduled-only job could not be started by hand in CI
// either).
func (j *Job) requested() bool {
	for _, t := range j.Triggers {
		if t.Event != "schedule" {
			return true
		}
	}
	return len(j.Triggers) == 0
}

// job writes jobs/, policies/, tests/ and runbooks/ for one move.
func (p *Plan) job(m *Move, ov *Overrides) {
	j := m.Job
	var left []string
	m.Channels, left = channels(j, ov)
	m.Left = append(m.Left, left...)
	var y yamlText
	y.comment("Imported by `jobplane import` from %s, job %s (line %d).", j.File, j.ID, j.Line)
	y.comment("Review every line marked REVIEW or TODO(import) before merging.")
	y.line(0, "name: %s", yamlKey(m.Name))
	y.line(0, "description: %s", quoteYAML(describe(j)))
	y.line(0, "owners: [%s]", GroupOperators)
	y.line(0, "runbook: runbooks/%s.md", m.Name)

	// Parameters.
	scheduled := schedule(j, ov)
	params := inputs(j)
	var required []string
	if len(params) > 0 {
		y.line(0, "params:")
		y.line(1, "type: object")
		y.line(1, "additionalProperties: false")
		var props yamlText
		for _, in := range params {
			schema, req, note := paramSchema(in, scheduled != nil)
			if note != "" {
				m.Left = append(m.Left, note)
			}
			props.line(2, "%s: %s", yamlKey(in.Name), schema)
			if req {
				required = append(required, yamlKey(in.Name))
			}
		}
		if len(required) > 0 {
			y.line(1, "required: [%s]", strings.Join(required, ", "))
		}
		y.line(1, "properties:")
		y.b.WriteString(props.b.String())
		m.Moved = append(m.Moved, fmt.Sprintf("parameters %s (from the inputs of %s)", paramNames(params), inputsEvent(j)))
	}

	// Run.
	y.line(0, "run:")
	y.line(1, "command:")
	y.line(2, "- bash")
	y.line(2, "- -c")
	script, sleft := p.script(m)
	m.Left = append(m.Left, sleft...)
	y.block(2, "- ", script)
	env, eleft := runEnv(j)
	m.Left = append(m.Left, eleft...)
	if len(env) > 0 {
		y.line(1, "env:")
		for _, e := range env {
			if e.todo != "" {
				y.line(2, "%s: %s   # TODO(import): %s", yamlKey(e.name), quoteYAML(e.value), oneLine(e.todo))
			} else {
				y.line(2, "%s: %s", yamlKey(e.name), quoteYAML(e.value))
			}
		}
	}
	if j.TimeoutMinutes > 0 {
		y.line(1, "timeout: %dm", int(math.Ceil(j.TimeoutMinutes)))
	} else {
		y.line(1, "timeout: 6h   # REVIEW: the CI's default bound; set the real one")
	}
	if j.Image != "" {
		// Commented out: with run.image only a container or Kubernetes
		// runner takes the job, and the CI's image may have no bash.
		y.line(1, "# image: %s   # REVIEW: the CI ran the job in this image; uncomment to run it there (the image needs bash)", oneLine(j.Image))
	}
	labels, lleft := runnerLabels(j)
	m.Left = append(m.Left, lleft...)
	if len(labels) > 0 {
		y.line(0, "runs_on: {pool: default, labels: [%s]}", strings.Join(quoteAll(labels), ", "))
	}
	if usesCheckout(j) {
		y.line(0, "source: {repo: %s}   # REVIEW: start the server with --source-repo %s=URL", yamlKey(ov.sourceRepo()), ov.sourceRepo())
		m.Moved = append(m.Moved, fmt.Sprintf("the checkout becomes source: {repo: %s}", ov.sourceRepo()))
	}

	// Lease from the concurrency group.
	if j.leaseKey != "" {
		y.comment("From concurrency group %q (%s:%d).", j.Concurrency.Group, j.File, j.Concurrency.Line)
		if j.Concurrency.CancelInProgress {
			y.comment("REVIEW: the CI cancelled the run in progress for a new one; jobplane queues the new run instead.")
		}
		y.line(0, "leases:")
		y.line(1, "- key: %s", quoteYAML(j.leaseKey))
		y.line(2, "on_conflict: queue")
		m.Moved = append(m.Moved, fmt.Sprintf("concurrency group %q becomes lease key %s", j.Concurrency.Group, j.leaseKey))
	}

	// Connectors from secrets.
	for _, b := range j.bindings {
		if b.Kind == bindSecret && !slices.Contains(m.Connectors, connectorName(b.Source)) {
			m.Connectors = append(m.Connectors, connectorName(b.Source))
		}
	}
	slices.Sort(m.Connectors)
	for _, s := range j.Secrets {
		if ephemeralSecrets[s] {
			m.Left = append(m.Left, fmt.Sprintf("reads %s, which the CI mints per run; give the job a GitHub App token or a connector instead", s))
			continue
		}
		if !slices.Contains(m.Connectors, connectorName(s)) {
			m.Left = append(m.Left, fmt.Sprintf("reads secret %s where the import cannot rewrite it (an expression or an action input); pass it through connector %s by hand", s, connectorName(s)))
		}
	}
	if len(m.Connectors) > 0 {
		y.comment("REVIEW: each connector releases the CI secret it replaces; narrow it to what the job needs.")
		y.line(0, "connectors:")
		for _, c := range m.Connectors {
			y.line(1, "%s: write", yamlKey(c))
		}
		m.Moved = append(m.Moved, fmt.Sprintf("secrets become connectors %s", strings.Join(m.Connectors, ", ")))
	}

	// Schedule.
	if scheduled != nil {
		y.line(0, "schedule: {cron: %s, tz: %s, channel: %s}", quoteYAML(scheduled.Cron), quoteYAML(cmp.Or(scheduled.Timezone, "UTC")), yamlKey(m.Channels[0].Name))
		m.Moved = append(m.Moved, fmt.Sprintf("schedule %s (%s) in channel %s", scheduled.Cron, cmp.Or(scheduled.Timezone, "UTC"), m.Channels[0].Name))
	}
	m.Left = append(m.Left, scheduleLeft(j, scheduled)...)
	p.Files["jobs/"+m.Name+".yaml"] = y.bytes()
	// A schedule the file does not hold (GitLab's live in the project
	// settings) still gets its rule: adding the cron is then enough.
	p.policy(m, scheduled != nil || j.hasTrigger("schedule"), params)
	p.Files["runbooks/"+m.Name+".md"] = runbook(m)
	for _, n := range j.Notes {
		m.Left = append(m.Left, fmt.Sprintf("%s:%d:%d: %s", n.File, n.Line, n.Column, n.Message))
	}
}

func describe(j *Job) string {
	name := cmp.Or(j.Name, j.ID)
	if j.Workflow != "" && j.Workflow != name {
		return j.Workflow + ": " + name
	}
	return name
}

func paramNames(ps []Param) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// paramSchema renders one input as a JSON Schema in flow style. A
// scheduled job's required inputs without a default become optional: a
// scheduled CI run had them empty.
func paramSchema(in Param, scheduled bool) (schema string, required bool, note string) {
	s := map[string]any{}
	switch in.Type {
	case "boolean":
		s["type"] = "boolean"
	case "number":
		s["type"] = "number"
	default:
		s["type"] = "string"
	}
	if in.Description != "" {
		s["description"] = in.Description
	}
	if len(in.Options) > 0 {
		s["enum"] = in.Options
	}
	if in.Default != nil {
		switch in.Type {
		case "boolean":
			if b, err := strconv.ParseBool(*in.Default); err == nil {
				s["default"] = b
			} else {
				note = fmt.Sprintf("input %s: default %q is not a boolean; dropped", in.Name, *in.Default)
			}
		case "number":
			if f, err := strconv.ParseFloat(*in.Default, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				s["default"] = json.Number(strconv.FormatFloat(f, 'f', -1, 64))
			} else {
				note = fmt.Sprintf("input %s: default %q is not a number; dropped", in.Name, *in.Default)
			}
		default:
			if len(in.Options) > 0 && !slices.Contains(in.Options, *in.Default) {
				note = fmt.Sprintf("input %s: default %q is not one of its options; dropped", in.Name, *in.Default)
			} else {
				s["default"] = *in.Default
			}
		}
	}
	_, hasDefault := s["default"]
	required = in.Required && !hasDefault
	if required && scheduled {
		required = false
		note = fmt.Sprintf("input %s is required when started by hand but was empty on scheduled runs; it is optional here, so check the script copes", in.Name)
	}
	return orderedSchema(s), required, note
}

// orderedSchema renders a schema in YAML flow style, keys in a fixed
// order, values as JSON (which YAML reads the same).
func orderedSchema(s map[string]any) string {
	var parts []string
	for _, k := range []string{"type", "description", "enum", "default"} {
		if v, ok := s[k]; ok {
			parts = append(parts, k+": "+string(marshalNoEscape(v)))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func marshalNoEscape(v any) []byte {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return []byte(strings.TrimSuffix(sb.String(), "\n"))
}

// schedule returns the trigger whose cron becomes the job's schedule.
func schedule(j *Job, ov *Overrides) *Trigger {
	if o, ok := ov.job(j); ok && o.Cron != "" {
		return &Trigger{Event: "schedule", Cron: o.Cron, Timezone: o.TZ}
	}
	for _, t := range j.Triggers {
		if t.Event != "schedule" || t.Cron == "" {
			continue
		}
		if _, err := cron.ParseStandard(t.Cron); err != nil || strings.Contains(t.Cron, "TZ=") {
			continue
		}
		return &t
	}
	return nil
}

func scheduleLeft(j *Job, used *Trigger) []string {
	var left []string
	for _, t := range j.Triggers {
		if t.Event != "schedule" {
			continue
		}
		switch {
		case t.Cron == "":
			if used == nil {
				left = append(left, fmt.Sprintf("scheduled in CI (%s) with a cron the file does not hold; give it as `cron:` for this job in the --classify file", cmp.Or(t.Detail, "pipeline schedule")))
			}
		case used == nil || used.Cron != t.Cron:
			if _, err := cron.ParseStandard(t.Cron); err != nil {
				left = append(left, fmt.Sprintf("cron %q is not a five-field expression jobplane reads; schedule it by hand", t.Cron))
			} else if used != nil {
				left = append(left, fmt.Sprintf("cron %q also started it; a jobplane job has one schedule", t.Cron))
			}
		}
	}
	return left
}

type envEntry struct {
	name, value, todo string
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// runEnv is the job's run.env: literal variables, and one empty entry per
// CI variable the script reads, to be filled in.
func runEnv(j *Job) ([]envEntry, []string) {
	var out []envEntry
	var left []string
	seen := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(j.Env)) {
		if !envNameRe.MatchString(k) || strings.HasPrefix(k, "JOBPLANE_") {
			left = append(left, fmt.Sprintf("environment variable %s cannot be set by run.env (invalid or reserved name); set it in the script", k))
			continue
		}
		seen[k] = true
		out = append(out, envEntry{name: k, value: j.Env[k]})
	}
	for _, b := range j.bindings {
		if b.Kind != bindVar || seen[b.Name] {
			continue
		}
		seen[b.Name] = true
		if !envNameRe.MatchString(b.Name) || strings.HasPrefix(b.Name, "JOBPLANE_") {
			left = append(left, fmt.Sprintf("variable %s cannot be set by run.env; set it in the script", b.Name))
			continue
		}
		out = append(out, envEntry{name: b.Name, value: "", todo: "was the CI variable " + b.Source + "; set its value"})
		left = append(left, fmt.Sprintf("CI variable %s has an empty value in run.env: fill it in", b.Source))
	}
	return out, left
}

// runnerLabels maps the CI's runner labels to jobplane runner labels.
func runnerLabels(j *Job) ([]string, []string) {
	var out, left []string
	add := func(l string) {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	for _, l := range j.RunsOn {
		low := strings.ToLower(l)
		switch {
		case strings.TrimSpace(l) == "":
		case strings.Contains(l, "${{") || strings.HasPrefix(l, "group:"):
			left = append(left, fmt.Sprintf("runs-on %s is not a label; choose the runner labels by hand", l))
		case strings.HasPrefix(low, "ubuntu-"):
			add("linux")
		case strings.HasPrefix(low, "windows-"):
			add("windows")
		case strings.HasPrefix(low, "macos-"):
			add("macos")
		case low == "self-hosted":
		default:
			add(l)
		}
	}
	return out, left
}

func usesCheckout(j *Job) bool {
	if j.Kind() == KindGitLab {
		return true
	}
	for _, s := range j.Steps {
		if s.Kind == StepUses && strings.HasPrefix(strings.ToLower(s.Uses), "actions/checkout@") {
			return true
		}
	}
	return false
}

// Kind says which CI the job comes from.
func (j *Job) Kind() string { return j.kind }

// script renders the steps as one bash script.
func (p *Plan) script(m *Move) (string, []string) {
	j := m.Job
	var b strings.Builder
	var left []string
	b.WriteString("set -eo pipefail\n")
	if len(j.exports) > 0 {
		b.WriteString("# Variables the CI computed, from jobplane's parameters and connectors:\n")
		for _, e := range j.exports {
			b.WriteString(e + "\n")
		}
	}
	for i, s := range j.Steps {
		b.WriteString("\n")
		label := fmt.Sprintf("# Step %d", i+1)
		if s.Name != "" {
			label += ": " + oneLine(s.Name)
		}
		fmt.Fprintf(&b, "%s (%s:%d)\n", label, s.File, s.Line)
		if s.From != "" {
			fmt.Fprintf(&b, "# from %s\n", oneLine(s.From))
		}
		if s.If != "" {
			fmt.Fprintf(&b, "# REVIEW: the CI ran this step only if: %s\n", oneLine(s.If))
			left = append(left, fmt.Sprintf("step %d ran only if `%s`; the script runs it always", i+1, oneLine(s.If)))
		}
		switch s.Kind {
		case StepUses:
			if strings.HasPrefix(strings.ToLower(s.Uses), "actions/checkout@") {
				b.WriteString("# actions/checkout: the run starts in a checkout of the job's source.\n")
				continue
			}
			fmt.Fprintf(&b, "# TODO(import): uses %s", oneLine(s.Uses))
			if len(s.With) > 0 {
				var with []string
				for _, kv := range s.With {
					with = append(with, kv.Name+"="+oneLine(kv.Value))
				}
				fmt.Fprintf(&b, " with %s", strings.Join(with, ", "))
			}
			b.WriteString("; do here what the action did, or have the runner provide it.\n")
			left = append(left, fmt.Sprintf("step %d uses %s: rewrite it as commands (TODO in the script)", i+1, s.Uses))
		case StepRun:
			body := strings.TrimRight(cmp.Or(s.script, s.Run), "\n")
			wrapped := len(s.Env) > 0 || s.Dir != ""
			if wrapped {
				b.WriteString("(\n")
				for _, kv := range s.Env {
					fmt.Fprintf(&b, "export %s=%s\n", kv.Name, kv.Value)
				}
				if s.Dir != "" {
					fmt.Fprintf(&b, "cd %s\n", shellWord([]wordPart{{text: s.Dir, literal: true}}))
				}
			}
			switch shell := strings.ToLower(strings.TrimSpace(s.Shell)); {
			case shell == "" || shell == "bash" || shell == "sh":
				b.WriteString(body + "\n")
			case shell == "python" || shell == "pwsh" || shell == "powershell":
				prog := map[string]string{"python": "python3 -", "pwsh": "pwsh -NoProfile -Command -", "powershell": "pwsh -NoProfile -Command -"}[shell]
				fmt.Fprintf(&b, "%s <<'JOBPLANE_STEP'\n%s\nJOBPLANE_STEP\n", prog, body)
			default:
				fmt.Fprintf(&b, "# TODO(import): the CI ran this with shell %q\n%s\n", s.Shell, body)
				left = append(left, fmt.Sprintf("step %d ran with shell %q; check it runs under bash", i+1, s.Shell))
			}
			if wrapped {
				b.WriteString(")\n")
			}
		}
	}
	if len(j.Steps) == 0 {
		b.WriteString("\n# TODO(import): the CI job had no steps the import could read.\necho 'nothing to run' >&2\nexit 1\n")
		left = append(left, "no steps were found; the script fails until it is written")
	}
	return b.String(), left
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	return strings.ReplaceAll(s, "\n", " ")
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = quoteYAML(s)
	}
	return out
}

// yamlKey writes a string (a key or a name) plainly when YAML reads it back
// as the same string, and quoted otherwise: a job named 2024 or a channel
// named on must stay strings.
func yamlKey(s string) string {
	if plainKeyRe.MatchString(s) && !yamlWords[strings.ToLower(s)] {
		return s
	}
	return quoteYAML(s)
}

var (
	plainKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
	yamlWords  = map[string]bool{"true": true, "false": true, "null": true, "yes": true, "no": true, "on": true, "off": true, "y": true, "n": true, "nan": true, "inf": true}
)

// yamlText builds a YAML document line by line, with comments.
type yamlText struct {
	b strings.Builder
}

func (y *yamlText) line(indent int, format string, args ...any) {
	y.b.WriteString(strings.Repeat("  ", indent))
	fmt.Fprintf(&y.b, format, args...)
	y.b.WriteByte('\n')
}

func (y *yamlText) comment(format string, args ...any) {
	for _, l := range strings.Split(fmt.Sprintf(format, args...), "\n") {
		y.b.WriteString("# " + l + "\n")
	}
}

// block writes s after prefix as a literal block scalar when it can be one,
// else as a quoted string.
func (y *yamlText) block(indent int, prefix, s string) {
	pad := strings.Repeat("  ", indent)
	if !literalOK(s) {
		y.b.WriteString(pad + prefix + quoteYAML(s) + "\n")
		return
	}
	y.b.WriteString(pad + prefix + "|\n")
	inner := pad + strings.Repeat(" ", len(prefix))
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if l == "" {
			y.b.WriteString("\n")
			continue
		}
		y.b.WriteString(inner + l + "\n")
	}
}

// literalOK says a string survives a literal block scalar unchanged: it
// ends with one newline, its first line does not start with a space, and
// it holds only printable characters and tabs.
func literalOK(s string) bool {
	if !strings.HasSuffix(s, "\n") || strings.HasSuffix(s, "\n\n") || strings.HasPrefix(s, " ") || strings.HasPrefix(s, "\t") {
		return false
	}
	for _, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		if !unicode.IsPrint(r) || r == '\uFEFF' {
			return false
		}
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == "" && l != "" {
			return false // whitespace-only lines would change the indentation
		}
	}
	return true
}

func (y *yamlText) bytes() []byte { return []byte(y.b.String()) }

// policy writes the rules and the policy tests of one move.
func (p *Plan) policy(m *Move, scheduled bool, params []Param) {
	j := m.Job
	var rules, tests yamlText
	rules.comment("Who may run %s, as the CI implied (imported from %s).", m.Name, j.Key)
	rules.line(0, "rules:")
	tests.line(0, "tests:")
	grants := ""
	var grantList []string
	for _, c := range m.Connectors {
		grantList = append(grantList, yamlKey(c)+": write")
	}
	if len(grantList) > 0 {
		grants = "{" + strings.Join(grantList, ", ") + "}"
	}
	operator, _ := p.members(GroupOperators)
	example := exampleParams(params)
	for _, ch := range m.Channels {
		approval := ""
		expect := "allow"
		if ch.Approval > 0 {
			approval = fmt.Sprintf("{count: %d, groups: [%s]}", ch.Approval, GroupApprovers)
			expect = "approval"
		}
		if j.requested() {
			rules.line(1, "- id: %s", yamlKey(ruleID(m.Name, ch.Name)))
			rules.line(2, "jobs: [%s]", yamlKey(m.Name))
			rules.line(2, "channels: [%s]", yamlKey(ch.Name))
			rules.line(2, "groups: [%s]", GroupOperators)
			if approval != "" {
				if ch.Environment != "" {
					rules.line(2, "# REVIEW: environment %s is assumed protected; its reviewers are the approvers.", oneLine(ch.Environment))
				}
				rules.line(2, "approval: %s", approval)
			}
			if grants != "" {
				rules.line(2, "grants: %s", grants)
			}
			tests.line(1, "- name: %s", quoteYAML(fmt.Sprintf("operators request %s in %s", m.Name, ch.Name)))
			tests.line(2, "request: {actor: %s, job: %s, channel: %s%s}", yamlKey(operator), yamlKey(m.Name), yamlKey(ch.Name), example)
			tests.line(2, "expect: %s", expect)
			if grants != "" {
				tests.line(2, "grants: %s", grants)
			}
			tests.line(1, "- name: %s", quoteYAML(fmt.Sprintf("nobody else requests %s in %s", m.Name, ch.Name)))
			tests.line(2, "request: {actor: not-an-operator, job: %s, channel: %s%s}", yamlKey(m.Name), yamlKey(ch.Name), example)
			tests.line(2, "expect: deny")
		}
	}
	if scheduled {
		ch := m.Channels[0]
		rules.line(1, "- id: %s", yamlKey(ruleID(m.Name, "schedule")))
		rules.line(2, "jobs: [%s]", yamlKey(m.Name))
		rules.line(2, "channels: [%s]", yamlKey(ch.Name))
		rules.line(2, "users: [scheduler]")
		expect := "allow"
		if ch.Approval > 0 {
			rules.line(2, "# REVIEW: a protected environment held scheduled runs for its reviewers too.")
			rules.line(2, "approval: {count: %d, groups: [%s]}", ch.Approval, GroupApprovers)
			expect = "approval"
		}
		if grants != "" {
			rules.line(2, "grants: %s", grants)
		}
		tests.line(1, "- name: %s", quoteYAML(fmt.Sprintf("the scheduler requests %s in %s", m.Name, ch.Name)))
		tests.line(2, "request: {actor: scheduler, job: %s, channel: %s}", yamlKey(m.Name), yamlKey(ch.Name))
		tests.line(2, "expect: %s", expect)
		if grants != "" {
			tests.line(2, "grants: %s", grants)
		}
	}
	if !j.requested() {
		tests.line(1, "- name: %s", quoteYAML(fmt.Sprintf("%s is not requested by hand", m.Name)))
		tests.line(2, "request: {actor: %s, job: %s, channel: %s%s}", yamlKey(operator), yamlKey(m.Name), yamlKey(m.Channels[0].Name), example)
		tests.line(2, "expect: deny")
	}
	p.Files["policies/"+m.Name+".yaml"] = rules.bytes()
	p.Files["tests/"+m.Name+".yaml"] = tests.bytes()
}

func ruleID(job, suffix string) string {
	return job + "-" + suffix
}

// exampleParams are parameters a policy test can request with: the
// required ones, each with a value its schema accepts.
func exampleParams(params []Param) string {
	var parts []string
	for _, in := range params {
		if !in.Required || in.Default != nil {
			continue
		}
		var v string
		switch {
		case len(in.Options) > 0:
			v = quoteYAML(in.Options[0])
		case in.Type == "boolean":
			v = "false"
		case in.Type == "number":
			v = "1"
		default:
			v = quoteYAML("example")
		}
		parts = append(parts, yamlKey(in.Name)+": "+v)
	}
	if len(parts) == 0 {
		return ""
	}
	return ", params: {" + strings.Join(parts, ", ") + "}"
}

// members returns a group's members (the override's, else a placeholder)
// and whether they are placeholders.
func (p *Plan) members(group string) (string, bool) {
	ov := p.Overrides
	switch group {
	case GroupOperators:
		if ov != nil && len(ov.Operators) > 0 {
			return ov.Operators[0], false
		}
		return placeholderOperator, true
	default:
		if ov != nil && len(ov.Approvers) > 0 {
			return ov.Approvers[0], false
		}
		return placeholderApprover, true
	}
}

func (p *Plan) groups(ov *Overrides) []byte {
	var y yamlText
	y.comment("Groups of the imported jobs. Members are the people who started these jobs in CI")
	y.comment("(operators) and the reviewers of its protected environments (approvers).")
	y.line(0, "groups:")
	ops, apps := []string{placeholderOperator}, []string{placeholderApprover}
	if ov != nil && len(ov.Operators) > 0 {
		ops = ov.Operators
	} else {
		p.Placeholders = true
	}
	if ov != nil && len(ov.Approvers) > 0 {
		apps = ov.Approvers
	} else {
		p.Placeholders = true
	}
	for _, g := range []struct {
		name    string
		members []string
	}{{GroupApprovers, apps}, {GroupOperators, ops}} {
		y.line(1, "%s:", g.name)
		if g.members[0] == placeholderOperator || g.members[0] == placeholderApprover {
			y.line(2, "# TODO(import): replace the example member with your people (in the --classify file's groups:, then import again).")
		}
		y.line(2, "members: [%s]", strings.Join(quoteAll(g.members), ", "))
	}
	return y.bytes()
}

func connectorFile(name, secret string, chans []string) []byte {
	var y yamlText
	y.comment("Stands in for the CI secret %s. Set each channel's value with", secret)
	y.comment("`jobplane secrets set NAME`, then delete the CI secret.")
	y.comment("REVIEW: give read a credential that can only read, if the system has one.")
	y.line(0, "name: %s", yamlKey(name))
	y.line(0, "type: static")
	y.line(0, "bindings:")
	for _, ch := range chans {
		sec := secretName(name, ch)
		y.line(1, "%s: {read: {%s: %s}, write: {%s: %s}}", yamlKey(ch), connectorKey, yamlKey(sec), connectorKey, yamlKey(sec))
	}
	return y.bytes()
}

// secretName is the jobplane secret holding a connector's value in one
// channel.
func secretName(conn, channel string) string {
	s := conn + "-" + channel
	if len(s) > 63 {
		s = strings.TrimRight(conn[:max(1, 62-len(channel))], "-") + "-" + channel
	}
	return s
}

func runbook(m *Move) []byte {
	j := m.Job
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", m.Name)
	fmt.Fprintf(&b, "Imported from `%s` (%s, line %d).\n\n", j.Key, j.File, j.Line)
	b.WriteString("**Impact:** TODO(import): what this job changes, and for whom.\n")
	b.WriteString("**Rollback:** TODO(import): how to undo a run, or why it need not be undone.\n")
	b.WriteString("**Expected runtime:** TODO(import): how long a normal run takes.\n\n")
	fmt.Fprintf(&b, "Classified %s (%s confidence):\n\n", j.Class.Class, j.Class.Confidence)
	for _, e := range j.Class.Evidence {
		if e.Class == j.Class.Class {
			fmt.Fprintf(&b, "- %s\n", e.Fact)
		}
	}
	return []byte(b.String())
}

// secrets lists every long-lived secret the inventory reads, and who
// reads it: the list to drive to zero.
func (p *Plan) secrets(inv *Inventory, connSecret map[string]string) {
	by := map[string][]SecretReader{}
	for _, j := range inv.Jobs {
		if j.onlyCalled() {
			// Its secrets are its callers' secrets under other names; the
			// callers list them.
			continue
		}
		for _, s := range j.Secrets {
			if ephemeralSecrets[s] {
				continue
			}
			by[s] = append(by[s], SecretReader{Key: j.Key, Moves: j.Moves()})
		}
	}
	for _, s := range slices.Sorted(maps.Keys(by)) {
		u := SecretUse{Name: s, Jobs: by[s]}
		if _, ok := connSecret[connectorName(s)]; ok {
			u.Connector = connectorName(s)
		}
		p.Secrets = append(p.Secrets, u)
	}
}

// Env names a job's parameter variable, for the GitLab parser.
func paramEnv(name string) string { return protocol.ParamEnvName(name) }
