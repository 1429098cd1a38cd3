package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/robfig/cron/v3"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Defaults and bounds of job fields.
const (
	DefaultPool        = "default"
	DefaultTimeout     = time.Hour
	DefaultLeaseTTL    = 30 * time.Second
	MinLeaseTTL        = 2 * time.Second
	MaxLeaseTTL        = time.Hour
	DefaultMaxAttempts = 1
	MaxMaxAttempts     = 100
	DefaultBackoff     = 10 * time.Second

	// ExecutorRunner: attempts are claimed by jobplane runners.
	ExecutorRunner = "runner"
	// ExecutorGitHubActions: attempts are dispatched as a workflow run in
	// the run's own repository (the compatibility mode, docs/github.md).
	ExecutorGitHubActions = "github-actions"
	// ActionsPool is the pool of a github-actions job's attempts. Runner
	// pool names never start with "@", so no runner claims them; only the
	// Actions exchange hands them out (store.ActionsPool).
	ActionsPool = "@github-actions"

	// MaxParamsSize bounds a run's params JSON, which ends up in the
	// environment of a process.
	MaxParamsSize = 64 << 10
)

// Job is one validated job definition.
type Job struct {
	Name        string   `json:"name"`
	File        string   `json:"file"`
	Description string   `json:"description,omitempty"`
	Owners      []string `json:"owners,omitempty"`
	Runbook     string   `json:"runbook,omitempty"`
	// Params is the JSON Schema of the params object, as JSON; nil when the
	// job takes no parameters.
	Params     json.RawMessage   `json:"params,omitempty"`
	Run        Run               `json:"run"`
	RunsOn     RunsOn            `json:"runs_on"`
	Leases     []Lease           `json:"leases,omitempty"`
	Retries    Retries           `json:"retries"`
	Connectors map[string]string `json:"connectors,omitempty"`
	Artifacts  []Artifact        `json:"artifacts,omitempty"`
	Source     *Source           `json:"source,omitempty"`
	Schedule   *Schedule         `json:"schedule,omitempty"`
	On         *On               `json:"on,omitempty"`
	// Executor is how attempts run: ExecutorRunner (claimed by jobplane
	// runners, the default) or ExecutorGitHubActions (dispatched as a
	// workflow in the run's repository).
	Executor string `json:"executor"`
	// Workflow is the workflow file under .github/workflows/ that a
	// github-actions job dispatches.
	Workflow  string     `json:"workflow,omitempty"`
	Retention *Retention `json:"retention,omitempty"`
	// Isolation is IsolationRequired when only isolated runners may run
	// the job, else IsolationNone.
	Isolation string `json:"isolation"`

	schema   *jsonschema.Schema
	defaults map[string]any
	// runbookLine and runbookColumn locate the runbook field, for
	// CheckRunbooks.
	runbookLine, runbookColumn int
}

// Run is how an attempt executes.
type Run struct {
	Command  []string          `json:"command"`
	Env      map[string]string `json:"env,omitempty"`
	Timeout  time.Duration     `json:"timeout"`
	LeaseTTL time.Duration     `json:"lease_ttl"`
	// Image is the OCI image the attempt runs in; empty: the runner's host.
	Image     string     `json:"image,omitempty"`
	Resources *Resources `json:"resources,omitempty"`
	// Network is NetworkDefault or NetworkNone.
	Network string `json:"network"`
	// Workdir is where the command starts: relative to the workspace, or
	// an absolute directory of Image.
	Workdir string `json:"workdir,omitempty"`
}

// RunsOn selects the runners eligible for the job.
type RunsOn struct {
	Pool   string   `json:"pool"`
	Labels []string `json:"labels,omitempty"`
}

// Lease is a mutual-exclusion key the run must hold. Its runtime is not part
// of this package; only the shape is checked here.
type Lease struct {
	Key        string `json:"key"`
	OnConflict string `json:"on_conflict"` // queue | reject
	Limit      int    `json:"limit"`       // holders at once, ≥ 1
	Once       bool   `json:"once,omitempty"`
}

// Retries is the attempt policy.
type Retries struct {
	MaxAttempts int           `json:"max_attempts"`
	Backoff     time.Duration `json:"backoff"`
}

// Artifact is a file the run may upload.
type Artifact struct {
	Name     string `json:"name"`
	Role     string `json:"role,omitempty"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
}

// Schedule requests the job periodically as principal "scheduler".
type Schedule struct {
	Cron    string          `json:"cron"`
	TZ      string          `json:"tz"`
	Channel string          `json:"channel"`
	Params  json.RawMessage `json:"params,omitempty"`
	CatchUp string          `json:"catch_up"` // latest | none | all
}

var (
	leasePlaceholderRe = regexp.MustCompile(`\{[^{}]*\}`)
	leaseLiteralRe     = regexp.MustCompile(`^[A-Za-z0-9:._-]*$`)
	artifactNameRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	envNameRe          = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	workflowFileRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.ya?ml$`)
)

func (p *parse) parseJob(d *yamlpos.Decoder, path string, body ast.Node, broken bool) {
	name := strings.TrimSuffix(strings.TrimPrefix(path, JobsDir), ".yaml")
	if !jobNameRe.MatchString(name) {
		d.Errs = append(d.Errs, Error{File: path, Message: fmt.Sprintf("job file name %q must match %s", name, jobNameRe)})
		return
	}
	if broken {
		return
	}
	if body == nil {
		d.Errs = append(d.Errs, Error{File: path, Message: "empty job definition"})
		return
	}
	j := &Job{
		File:      path,
		Run:       Run{Timeout: DefaultTimeout, LeaseTTL: DefaultLeaseTTL, Network: NetworkDefault},
		Isolation: IsolationNone,
		RunsOn:    RunsOn{Pool: DefaultPool},
		Retries:   Retries{MaxAttempts: DefaultMaxAttempts, Backoff: DefaultBackoff},
		Executor:  ExecutorRunner,
	}
	var scheduleNode, executorNode, workflowNode ast.Node
	var leaseKeys []ast.Node
	present, ok := d.Object(body, "", 0, map[string]func(ast.Node, string){
		"name": func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				j.Name = s
				if s != name {
					d.Add(v, f, "must equal the file name %q", name)
				}
			}
		},
		"description": func(v ast.Node, f string) { j.Description, _ = d.Str(v, f) },
		"owners": func(v ast.Node, f string) {
			items, _ := d.List(v, f)
			for i, item := range items {
				if s, ok := d.Str(item, yamlpos.Index(f, i)); ok {
					j.Owners = append(j.Owners, s)
					p.ref(d, s, item, yamlpos.Index(f, i))
				}
			}
		},
		"runbook": func(v ast.Node, f string) {
			j.Runbook, _ = d.Str(v, f)
			j.runbookLine, j.runbookColumn = yamlpos.Position(v)
		},
		"params":  func(v ast.Node, f string) { j.parseParams(d, v, f) },
		"run":     func(v ast.Node, f string) { j.parseRun(d, v, f) },
		"runs_on": func(v ast.Node, f string) { j.parseRunsOn(d, v, f) },
		"leases":  func(v ast.Node, f string) { leaseKeys = j.parseLeases(d, v, f) },
		"retries": func(v ast.Node, f string) { j.parseRetries(d, v, f) },
		"connectors": func(v ast.Node, f string) {
			es, _ := d.Entries(v, f, 1)
			j.Connectors = map[string]string{}
			for _, e := range es {
				ff := yamlpos.Join(f, e.Key)
				s, ok := "", false
				if e.Value == nil {
					d.Add(e.KeyNode, ff, "must be read or write")
				} else if s, ok = d.Str(e.Value, ff); ok && s != "read" && s != "write" {
					d.Add(e.Value, ff, "must be read or write, got %q", s)
				}
				j.Connectors[e.Key] = s
				line, col := yamlpos.Position(e.KeyNode)
				p.connRefs = append(p.connRefs, connRef{name: e.Key, file: d.File, line: line, column: col, field: ff})
			}
		},
		"artifacts": func(v ast.Node, f string) { j.parseArtifacts(d, v, f) },
		"source":    func(v ast.Node, f string) { j.parseSource(d, v, f) },
		"schedule":  func(v ast.Node, f string) { scheduleNode = v },
		"on":        func(v ast.Node, f string) { j.parseOn(d, v, f) },
		"executor": func(v ast.Node, f string) {
			executorNode = v
			if s, ok := d.Str(v, f); ok {
				if s != ExecutorRunner && s != ExecutorGitHubActions {
					d.Add(v, f, "must be %s or %s, got %q", ExecutorRunner, ExecutorGitHubActions, s)
					return
				}
				j.Executor = s
			}
		},
		"workflow": func(v ast.Node, f string) {
			workflowNode = v
			if s, ok := d.Str(v, f); ok {
				if !workflowFileRe.MatchString(s) {
					d.Add(v, f, "must be a workflow file name under .github/workflows/ (%s), got %q", workflowFileRe, s)
					return
				}
				j.Workflow = s
			}
		},
		"retention": func(v ast.Node, f string) { j.parseRetention(d, v, f) },
		"isolation": func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				if s != IsolationRequired && s != IsolationNone {
					d.Add(v, f, "must be %s or %s, got %q", IsolationRequired, IsolationNone, s)
					return
				}
				j.Isolation = s
			}
		},
	})
	if !ok {
		return
	}
	j.checkExecutor(d, body, present, executorNode, workflowNode)
	if !present["name"] {
		d.Add(body, "name", "is required")
	}
	if !present["run"] {
		d.Add(body, "run", "is required")
	}
	j.checkLeaseKeys(d, leaseKeys)
	if scheduleNode != nil {
		j.parseSchedule(d, scheduleNode, "schedule")
	}
	p.cat.jobs[name] = j
}

// checkExecutor checks the fields that go with the executor. A
// github-actions job runs in a workflow of the run's repository, so it needs
// a workflow file and a pull request to name that repository, and it has no
// jobplane runner to select.
func (j *Job) checkExecutor(d *yamlpos.Decoder, body ast.Node, present map[string]bool, executorNode, workflowNode ast.Node) {
	if j.Executor != ExecutorGitHubActions {
		if workflowNode != nil && executorNode != nil {
			d.Add(workflowNode, "workflow", "is only for executor %s", ExecutorGitHubActions)
		} else if workflowNode != nil {
			d.Add(workflowNode, "workflow", "needs executor: %s", ExecutorGitHubActions)
		}
		return
	}
	j.RunsOn = RunsOn{Pool: ActionsPool}
	if workflowNode == nil {
		d.Add(executorNode, "workflow", "is required with executor %s", ExecutorGitHubActions)
	}
	if present["runs_on"] {
		d.Add(executorNode, "runs_on", "selects jobplane runners; a job with executor %s runs in its workflow", ExecutorGitHubActions)
	}
	if j.On == nil || j.On.PullRequest == nil {
		d.Add(executorNode, "on.pull_request", "is required with executor %s: the workflow is dispatched in the pull request's repository", ExecutorGitHubActions)
	}
	// The workflow's own runner runs the command: its image, limits and
	// network are the workflow's (runs-on, container:), which jobplane
	// cannot see, let alone enforce.
	for _, f := range []struct {
		key string
		set bool
	}{{"image", j.Run.Image != ""}, {"resources", j.Run.Resources != nil}, {"network", j.Run.Network == NetworkNone}} {
		if f.set {
			d.Add(d.Lookup(body, []string{"run", f.key}), "run."+f.key,
				"is not enforced in a GitHub Actions workflow; with executor %s set it in the workflow (runs-on, container:)", ExecutorGitHubActions)
		}
	}
}

func (j *Job) parseRun(d *yamlpos.Decoder, n ast.Node, field string) {
	var workdirNode ast.Node
	present, ok := d.Object(n, field, 1, map[string]func(ast.Node, string){
		"image": func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				if err := ParseImageRef(s); err != nil {
					d.Add(v, f, "image reference %q: %v", s, err)
					return
				}
				j.Run.Image = s
			}
		},
		"resources": func(v ast.Node, f string) { j.parseResources(d, v, f) },
		"network": func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				if s != NetworkDefault && s != NetworkNone {
					d.Add(v, f, "must be %s or %s, got %q", NetworkNone, NetworkDefault, s)
					return
				}
				j.Run.Network = s
			}
		},
		"workdir": func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				j.Run.Workdir, workdirNode = s, v
			}
		},
		"command": func(v ast.Node, f string) {
			items, ok := d.List(v, f)
			if !ok {
				return
			}
			if len(items) == 0 {
				d.Add(v, f, "must not be empty")
			}
			for i, item := range items {
				if s, ok := d.Str(item, yamlpos.Index(f, i)); ok {
					if i == 0 && s == "" {
						d.Add(item, yamlpos.Index(f, i), "program must not be empty")
					}
					j.Run.Command = append(j.Run.Command, s)
				}
			}
		},
		"env": func(v ast.Node, f string) {
			j.Run.Env = d.StrMap(v, f, 2)
			es, _ := d.Entries(v, f, 2)
			for _, e := range es {
				if !envNameRe.MatchString(e.Key) {
					d.Add(e.KeyNode, yamlpos.Join(f, e.Key), "environment variable names must match %s", envNameRe)
				} else if strings.HasPrefix(e.Key, "JOBPLANE_") {
					d.Add(e.KeyNode, yamlpos.Join(f, e.Key), "the JOBPLANE_ prefix is reserved for variables set by jobplane")
				}
			}
		},
		"timeout": func(v ast.Node, f string) {
			if t, ok := d.Duration(v, f); ok {
				j.Run.Timeout = t
				if t <= 0 {
					d.Add(v, f, "must be greater than 0")
				}
			}
		},
		"lease_ttl": func(v ast.Node, f string) {
			if t, ok := d.Duration(v, f); ok {
				j.Run.LeaseTTL = t
				if t < MinLeaseTTL || t > MaxLeaseTTL {
					d.Add(v, f, "must be between %s and %s", MinLeaseTTL, MaxLeaseTTL)
				}
			}
		},
	})
	if ok && !present["command"] {
		d.Add(n, yamlpos.Join(field, "command"), "is required")
	}
	if workdirNode != nil {
		j.checkWorkdir(d, workdirNode, yamlpos.Join(field, "workdir"))
	}
}

func (j *Job) parseRunsOn(d *yamlpos.Decoder, n ast.Node, field string) {
	d.Object(n, field, 1, map[string]func(ast.Node, string){
		"pool": func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				if s == "" {
					d.Add(v, f, "must not be empty")
					return
				}
				j.RunsOn.Pool = s
			}
		},
		"labels": func(v ast.Node, f string) { j.RunsOn.Labels = d.StrList(v, f) },
	})
}

func (j *Job) parseRetries(d *yamlpos.Decoder, n ast.Node, field string) {
	d.Object(n, field, 1, map[string]func(ast.Node, string){
		"max_attempts": func(v ast.Node, f string) {
			if i, ok := d.Integer(v, f); ok {
				if i < 1 || i > MaxMaxAttempts {
					d.Add(v, f, "must be between 1 and %d", MaxMaxAttempts)
					return
				}
				j.Retries.MaxAttempts = int(i)
			}
		},
		"backoff": func(v ast.Node, f string) {
			if t, ok := d.Duration(v, f); ok {
				if t < 0 {
					d.Add(v, f, "must not be negative")
					return
				}
				j.Retries.Backoff = t
			}
		},
	})
}

// parseLeases returns the key node of each lease kept, for later checks.
func (j *Job) parseLeases(d *yamlpos.Decoder, n ast.Node, field string) []ast.Node {
	var keys []ast.Node
	items, _ := d.List(n, field)
	for i, item := range items {
		f := yamlpos.Index(field, i)
		l := Lease{OnConflict: "queue", Limit: 1}
		var keyNode ast.Node
		present, ok := d.Object(item, f, 2, map[string]func(ast.Node, string){
			"key": func(v ast.Node, f string) {
				keyNode = v
				if s, ok := d.Str(v, f); ok {
					l.Key = s
					checkLeaseTemplate(d, v, f, s)
				}
			},
			"on_conflict": func(v ast.Node, f string) {
				if s, ok := d.Str(v, f); ok {
					if s != "queue" && s != "reject" {
						d.Add(v, f, "must be queue or reject, got %q", s)
					}
					l.OnConflict = s
				}
			},
			"limit": func(v ast.Node, f string) {
				if x, ok := d.Integer(v, f); ok {
					if x < 1 || x > 1_000_000 {
						d.Add(v, f, "must be between 1 and 1000000")
						return
					}
					l.Limit = int(x)
				}
			},
			"once": func(v ast.Node, f string) { l.Once, _ = d.Boolean(v, f) },
		})
		if !ok {
			continue
		}
		if !present["key"] {
			d.Add(item, yamlpos.Join(f, "key"), "is required")
		}
		j.Leases = append(j.Leases, l)
		keys = append(keys, keyNode)
	}
	return keys
}

// checkLeaseTemplate checks what can be checked before parameters are known:
// the placeholders are known ones and the literal text is allowed in a key.
func checkLeaseTemplate(d *yamlpos.Decoder, n ast.Node, field, key string) {
	if key == "" {
		d.Add(n, field, "must not be empty")
		return
	}
	literal := leasePlaceholderRe.ReplaceAllString(key, "")
	if !leaseLiteralRe.MatchString(literal) {
		d.Add(n, field, "may contain only A-Z a-z 0-9 : . _ - and placeholders, got %q", key)
	}
	for _, ph := range leasePlaceholderRe.FindAllString(key, -1) {
		name := ph[1 : len(ph)-1]
		switch {
		case name == "channel", name == "job", name == "window.date", name == "window.hour":
		case strings.HasPrefix(name, "params.") && len(name) > len("params."):
		default:
			d.Add(n, field, "unknown placeholder %s (use {params.X}, {channel}, {job}, {window.date} or {window.hour})", ph)
		}
	}
}

// checkLeaseKeys catches {params.X} naming a parameter the schema does not
// declare, which would otherwise fail every request at run time.
func (j *Job) checkLeaseKeys(d *yamlpos.Decoder, keys []ast.Node) {
	var props map[string]any
	if j.Params != nil {
		var schema map[string]any
		if json.Unmarshal(j.Params, &schema) == nil {
			props, _ = schema["properties"].(map[string]any)
		}
	}
	for i, l := range j.Leases {
		for _, ph := range leasePlaceholderRe.FindAllString(l.Key, -1) {
			name, ok := strings.CutPrefix(ph[1:len(ph)-1], "params.")
			if !ok {
				continue
			}
			if _, declared := props[name]; !declared {
				d.Add(keys[i], yamlpos.Index("leases", i)+".key", "placeholder %s names no property of params", ph)
			}
		}
	}
}

func (j *Job) parseArtifacts(d *yamlpos.Decoder, n ast.Node, field string) {
	items, _ := d.List(n, field)
	seen := map[string]bool{}
	for i, item := range items {
		f := yamlpos.Index(field, i)
		var a Artifact
		var nameNode ast.Node
		present, ok := d.Object(item, f, 2, map[string]func(ast.Node, string){
			"name": func(v ast.Node, f string) {
				nameNode = v
				if s, ok := d.Str(v, f); ok {
					a.Name = s
					if !artifactNameRe.MatchString(s) {
						d.Add(v, f, "must match %s", artifactNameRe)
					}
				}
			},
			"role": func(v ast.Node, f string) { a.Role, _ = d.Str(v, f) },
			"max_bytes": func(v ast.Node, f string) {
				if x, ok := d.Integer(v, f); ok {
					if x < 1 {
						d.Add(v, f, "must be greater than 0")
					}
					a.MaxBytes = x
				}
			},
		})
		if !ok {
			continue
		}
		if !present["name"] {
			d.Add(item, yamlpos.Join(f, "name"), "is required")
		} else if seen[a.Name] {
			d.Add(nameNode, yamlpos.Join(f, "name"), "duplicate artifact name %q", a.Name)
		}
		seen[a.Name] = true
		j.Artifacts = append(j.Artifacts, a)
	}
}

func (j *Job) parseSchedule(d *yamlpos.Decoder, n ast.Node, field string) {
	s := &Schedule{TZ: "UTC", CatchUp: "latest"}
	present, ok := d.Object(n, field, 1, map[string]func(ast.Node, string){
		"cron": func(v ast.Node, f string) {
			if c, ok := d.Str(v, f); ok {
				s.Cron = c
				// A TZ prefix would make the parser load zone files; the
				// zone has its own field.
				if strings.Contains(c, "TZ=") {
					d.Add(v, f, "set the time zone with schedule.tz, not in the expression")
				} else if _, err := cron.ParseStandard(c); err != nil {
					d.Add(v, f, "invalid cron expression: %v", err)
				}
			}
		},
		"tz": func(v ast.Node, f string) {
			if tz, ok := d.Str(v, f); ok {
				if tz == "" {
					d.Add(v, f, "must not be empty")
				}
				s.TZ = tz
			}
		},
		"channel": func(v ast.Node, f string) { s.Channel, _ = d.Str(v, f) },
		"params": func(v ast.Node, f string) {
			x, ok := d.Value(v, f, 2)
			if !ok {
				return
			}
			raw, err := json.Marshal(x)
			if err != nil {
				d.Add(v, f, "cannot encode params: %v", err)
				return
			}
			norm, err := j.ValidateParams(raw)
			var pe *ParamsError
			if errors.As(err, &pe) {
				target := v
				if pe.Field != "" {
					target = d.Lookup(v, strings.Split(pe.Field, "/"))
				}
				d.Add(target, f, "%s", err.Error())
				return
			}
			s.Params = norm
		},
		"catch_up": func(v ast.Node, f string) {
			if c, ok := d.Str(v, f); ok {
				if c != "latest" && c != "none" && c != "all" {
					d.Add(v, f, "must be latest, none or all, got %q", c)
				}
				s.CatchUp = c
			}
		},
	})
	if !ok {
		return
	}
	if !present["cron"] {
		d.Add(n, yamlpos.Join(field, "cron"), "is required")
	}
	if !present["channel"] || s.Channel == "" {
		d.Add(n, yamlpos.Join(field, "channel"), "is required")
	}
	if !present["params"] && j.schema != nil {
		if norm, err := j.ValidateParams(nil); err != nil {
			d.Add(n, yamlpos.Join(field, "params"), "%s", err.Error())
		} else {
			s.Params = norm
		}
	}
	j.Schedule = s
}

const schemaURL = "jobplane:///params.json"

// refuseLoader keeps schema compilation pure: a $ref to a file or URL would
// otherwise read the server's disk or network.
type refuseLoader struct{}

func (refuseLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("external references are not allowed: %s", u)
}

func (j *Job) parseParams(d *yamlpos.Decoder, n ast.Node, field string) {
	v, ok := d.Value(n, field, 1)
	if !ok {
		return
	}
	obj, isObj := v.(map[string]any)
	if !isObj {
		d.Add(n, field, "must be a JSON Schema mapping, got %s", yamlpos.KindOf(d.Resolve(n, field)))
		return
	}
	if t, has := obj["type"]; has && t != "object" {
		d.Add(d.Lookup(n, []string{"type"}), yamlpos.Join(field, "type"), "the params schema describes an object: type must be object")
		return
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		d.Add(n, field, "cannot encode schema: %v", err)
		return
	}
	// Round-trip through JSON so numbers are json.Number, as the validator
	// expects of documents, and defaults are what a JSON client would send.
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		d.Add(n, field, "cannot encode schema: %v", err)
		return
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		d.Add(n, field, "invalid schema: %v", err)
		return
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		target, msg := schemaErrorAt(d, n, err)
		d.Add(target, field, "invalid schema: %s", msg)
		return
	}
	j.Params = raw
	j.schema = sch
	if props, ok := doc.(map[string]any)["properties"].(map[string]any); ok {
		for name, p := range props {
			if pm, ok := p.(map[string]any); ok {
				if def, ok := pm["default"]; ok {
					if j.defaults == nil {
						j.defaults = map[string]any{}
					}
					j.defaults[name] = def
					// A default that its own property schema refuses would
					// make every run that relies on it fail at request time.
					if ps := sch.Properties[name]; ps != nil {
						if err := ps.Validate(def); err != nil {
							msg := err.Error()
							var ve *jsonschema.ValidationError
							if errors.As(err, &ve) {
								msg = firstLeaf(ve).ErrorKind.LocalizedString(printer)
							}
							d.Add(d.Lookup(n, []string{"properties", name, "default"}), yamlpos.Join(field, "properties."+name+".default"),
								"default does not satisfy its schema: %s", msg)
						}
					}
				}
			}
		}
	}
}

// schemaErrorAt finds the schema node an error is about, so the error points
// at the offending keyword's line rather than at "params:".
func schemaErrorAt(d *yamlpos.Decoder, n ast.Node, err error) (ast.Node, string) {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			leaf := firstLeaf(ve)
			return d.Lookup(n, leaf.InstanceLocation), leaf.ErrorKind.LocalizedString(printer)
		}
		return n, sve.Err.Error()
	}
	var rex *jsonschema.InvalidRegexError
	if errors.As(err, &rex) {
		return d.Lookup(n, fragmentTokens(rex.URL)), fmt.Sprintf("invalid regular expression %q: %v", rex.Regex, rex.Err)
	}
	var lue *jsonschema.LoadURLError
	if errors.As(err, &lue) {
		return n, fmt.Sprintf("cannot resolve %s: external references are not allowed", lue.URL)
	}
	msg := strings.ReplaceAll(err.Error(), schemaURL, "params")
	return n, msg
}

func fragmentTokens(u string) []string {
	_, frag, ok := strings.Cut(u, "#")
	if !ok {
		return nil
	}
	frag = strings.TrimPrefix(frag, "/")
	if frag == "" {
		return nil
	}
	var out []string
	for _, tok := range strings.Split(frag, "/") {
		if t, err := url.PathUnescape(tok); err == nil {
			tok = t
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		out = append(out, tok)
	}
	return out
}

var printer = message.NewPrinter(language.English)

// firstLeaf picks the failing leaf with the smallest instance location, so the
// error named is stable across runs (the validator's order is not specified).
func firstLeaf(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	var leaves []*jsonschema.ValidationError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.SortStableFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		return strings.Compare(leafField(a), leafField(b))
	})
	return leaves[0]
}

func leafField(e *jsonschema.ValidationError) string {
	loc := slices.Clone(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		if len(k.Missing) > 0 {
			loc = append(loc, slices.Min(k.Missing))
		}
	case *kind.AdditionalProperties:
		if len(k.Properties) > 0 {
			loc = append(loc, slices.Min(k.Properties))
		}
	}
	return strings.Join(loc, "/")
}

// ValidateParams checks a run's params against the job's schema and returns
// them normalized (compact JSON, keys sorted).
//
// Null or absent params mean {}. Before validating, every top-level property
// of the schema that has a `default` and is absent from params is set to that
// default: JSON Schema treats `default` as an annotation only, but job authors
// write `dry_run: {default: true}` expecting the job to see dry_run=true, and
// a safety default that silently did not apply would be worse than none.
// Defaults of nested properties are not applied.
//
// A job without a params schema accepts only {}.
func (j *Job) ValidateParams(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) > MaxParamsSize {
		return nil, &ParamsError{Message: fmt.Sprintf("larger than %d bytes", MaxParamsSize)}
	}
	trimmed := bytes.TrimSpace(raw)
	obj := map[string]any{}
	if len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(trimmed))
		if err != nil {
			return nil, &ParamsError{Message: "invalid JSON: " + err.Error()}
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &ParamsError{Message: "must be a JSON object"}
		}
		obj = m
		if err := checkNumbers(m, nil); err != nil {
			return nil, err
		}
	}
	if j.schema == nil {
		if len(obj) > 0 {
			keys := slices.Sorted(maps.Keys(obj))
			return nil, &ParamsError{Field: keys[0], Message: fmt.Sprintf("job %s takes no params", j.Name)}
		}
		return json.RawMessage("{}"), nil
	}
	for k, def := range j.defaults {
		if _, ok := obj[k]; !ok {
			obj[k] = def
		}
	}
	if err := j.schema.Validate(obj); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, &ParamsError{Message: err.Error()}
		}
		leaf := firstLeaf(ve)
		msg := leaf.ErrorKind.LocalizedString(printer)
		switch leaf.ErrorKind.(type) {
		case *kind.Required:
			msg = "is required"
		case *kind.AdditionalProperties:
			msg = "is not allowed"
		}
		return nil, &ParamsError{Field: leafField(leaf), Message: msg}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, &ParamsError{Message: err.Error()}
	}
	return out, nil
}
