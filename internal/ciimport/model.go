package ciimport

import (
	"cmp"
	"io/fs"
	"maps"
	"path"
	"slices"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Kinds of CI an inventory is read from.
const (
	KindGitHub = "github-actions"
	KindGitLab = "gitlab-ci"
)

// MaxFileSize is the largest CI file read, in bytes; a workflow is a few
// kilobytes, and a larger file is refused rather than parsed.
const MaxFileSize = 1 << 20

// Error is one problem of the input, with its position: the same type as a
// definitions error, printed as file:line:column: message.
type Error = yamlpos.Error

// Source is one tree of CI files: a repository checkout, or the directory
// of the files named on the command line.
type Source struct {
	// FS is the tree; every path below is relative to it.
	FS fs.FS
	// Prefix is prepended to paths in the inventory and in errors, so that
	// they name the files as the user named them ("." for none).
	Prefix string
	// Files are the workflow files to inventory (GitHub), or the one
	// pipeline file (GitLab). Other files of FS are read only when these
	// refer to them: reusable workflows, composite actions, includes.
	Files []string
}

// display is the path shown for a file of the source.
func (s Source) display(p string) string {
	if s.Prefix == "" || s.Prefix == "." {
		return p
	}
	return path.Join(s.Prefix, p)
}

// Inventory is everything read from the CI configuration.
type Inventory struct {
	Kind string `json:"kind"`
	// Files are the files read, as displayed.
	Files []string `json:"files"`
	Jobs  []*Job   `json:"jobs"`
	// Errors are the problems of the input, sorted by file and position.
	Errors []Error `json:"errors"`
	// Warnings are what the import could not follow although the input
	// is right (a remote include, another repository's workflow): the
	// inventory misses what they hold.
	Warnings []Error `json:"warnings"`
}

// Job is one CI job as found, with its classification once Classify ran.
type Job struct {
	// Key identifies the job in a --classify file: the workflow's path in
	// its repository, '#', the job's id. A GitHub import of several
	// repositories (or of files in several directories) keys by the path
	// as displayed instead, which names the repository too.
	Key    string `json:"key"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	// Workflow is the workflow's name (GitHub) or the pipeline file (GitLab).
	Workflow string `json:"workflow"`
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Stage    string `json:"stage,omitempty"`

	Triggers    []Trigger    `json:"triggers"`
	Environment string       `json:"environment,omitempty"`
	Secrets     []string     `json:"secrets,omitempty"`
	Variables   []string     `json:"variables,omitempty"`
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	RunsOn      []string     `json:"runs_on,omitempty"`
	Image       string       `json:"image,omitempty"`
	Needs       []string     `json:"needs,omitempty"`
	// Matrix names each matrix axis with its values ("go: 1.25, 1.26").
	Matrix []string `json:"matrix,omitempty"`
	// TimeoutMinutes is 0 when the file does not say.
	TimeoutMinutes float64 `json:"timeout_minutes,omitempty"`
	// Env are the literal environment variables the job sets (workflow,
	// job and pipeline level); values with expressions go to the script.
	Env   map[string]string `json:"env,omitempty"`
	Steps []Step            `json:"steps"`
	// Calls is the reusable workflow a GitHub caller job runs; its jobs'
	// steps are this job's steps.
	Calls string `json:"calls,omitempty"`
	// CalledBy lists the jobs that call this job's reusable workflow; such
	// a job is not migrated on its own.
	CalledBy []string `json:"called_by,omitempty"`

	// Notes are what the import could not carry over, with positions.
	Notes []Error `json:"notes,omitempty"`

	Class *Classification `json:"classification,omitempty"`

	kind string // KindGitHub | KindGitLab

	// bindings maps a name the script reads to where its value comes
	// from, for the writer (see binding).
	bindings []binding
	// leaseKey is the concurrency group as a jobplane lease key ("" for
	// none or when it cannot be translated).
	leaseKey string
	// exports are shell lines that set, before the steps, the variables
	// whose values the CI computed (from secrets or expressions).
	exports []string
}

// Trigger is one way the job is started.
type Trigger struct {
	// Event is push, pull_request, schedule, workflow_dispatch,
	// workflow_call, manual (GitLab), ...
	Event string `json:"event"`
	// Cron is the schedule's expression, when the file says it.
	Cron     string   `json:"cron,omitempty"`
	Timezone string   `json:"timezone,omitempty"`
	Branches []string `json:"branches,omitempty"`
	Types    []string `json:"types,omitempty"`
	Inputs   []Param  `json:"inputs,omitempty"`
	// Detail says what the file says when it is more than the event
	// (a GitLab rule, say).
	Detail string `json:"detail,omitempty"`
}

// Param is one input of a manually started job.
type Param struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Type        string   `json:"type"` // string | boolean | number | choice | environment
	Default     *string  `json:"default,omitempty"`
	Required    bool     `json:"required,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// Concurrency is a job's concurrency group (GitHub) or resource group
// (GitLab).
type Concurrency struct {
	Group            string `json:"group"`
	CancelInProgress bool   `json:"cancel_in_progress,omitempty"`
	Line             int    `json:"line"`
	Column           int    `json:"column"`
}

// Step kinds.
const (
	StepRun  = "run"
	StepUses = "uses"
)

// Step is one shell step or action of a job.
type Step struct {
	Kind   string `json:"kind"`
	Name   string `json:"name,omitempty"`
	Run    string `json:"run,omitempty"`
	Shell  string `json:"shell,omitempty"`
	Dir    string `json:"working_directory,omitempty"`
	Uses   string `json:"uses,omitempty"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	// With are an action's inputs, sorted by name.
	With []KV `json:"with,omitempty"`
	// Env are the step's own environment variables, sorted by name.
	Env []KV `json:"env,omitempty"`
	// From names the composite action or reusable workflow job the step
	// was inlined from.
	From string `json:"from,omitempty"`
	// If is the step's condition, kept for the reviewer.
	If string `json:"if,omitempty"`

	// script is Run rewritten for a jobplane script: references to
	// inputs, secrets and variables become the environment variables
	// jobplane sets.
	script string
}

// KV is one name and value.
type KV struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Binding kinds: where a name a job reads comes from.
const (
	bindParam  = "param"
	bindSecret = "secret"
	bindVar    = "var"
)

// binding says that the script reads Name (an environment variable, or an
// expression the writer rewrote) whose value comes from a parameter, a
// secret or a CI variable.
type binding struct {
	Name   string // the variable the original script reads
	Kind   string // bindParam | bindSecret | bindVar
	Source string // the parameter, secret or variable name
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func sortErrors(errs []Error) {
	slices.SortStableFunc(errs, func(a, b Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Field, b.Field), cmp.Compare(a.Message, b.Message))
	})
}

// finish sorts the inventory so that it is a function of its input only.
func (inv *Inventory) finish() {
	slices.Sort(inv.Files)
	inv.Files = slices.Compact(inv.Files)
	sortErrors(inv.Errors)
	inv.Errors = compactErrors(inv.Errors)
	sortErrors(inv.Warnings)
	inv.Warnings = compactErrors(inv.Warnings)
	if inv.Warnings == nil {
		inv.Warnings = []Error{}
	}
	for _, j := range inv.Jobs {
		slices.Sort(j.Secrets)
		j.Secrets = slices.Compact(j.Secrets)
		slices.Sort(j.Variables)
		j.Variables = slices.Compact(j.Variables)
		sortErrors(j.Notes)
		j.Notes = compactErrors(j.Notes)
		slices.Sort(j.CalledBy)
		j.CalledBy = slices.Compact(j.CalledBy)
		slices.SortFunc(j.bindings, func(a, b binding) int {
			return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Source, b.Source))
		})
		j.bindings = slices.Compact(j.bindings)
	}
	slices.SortFunc(inv.Jobs, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.ID, b.ID))
	})
	if inv.Jobs == nil {
		inv.Jobs = []*Job{}
	}
	if inv.Errors == nil {
		inv.Errors = []Error{}
	}
	if inv.Files == nil {
		inv.Files = []string{}
	}
}

// compactErrors says once a problem that two passes reported.
func compactErrors(errs []Error) []Error {
	return slices.Compact(errs)
}
