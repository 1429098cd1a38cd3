package ciimport

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/robfig/cron/v3"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Defaults of the written repository, when the --classify file is silent.
const (
	DefaultChannel    = "prod"
	DefaultSourceRepo = "app"
	// GroupOperators may request the moved jobs; GroupApprovers approve
	// the runs of protected channels.
	GroupOperators = "operators"
	GroupApprovers = "approvers"
	// placeholder members, until the team names its people.
	placeholderOperator = "operator-example"
	placeholderApprover = "approver-example"
)

var (
	nameRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	repoRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	channelRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	memberRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)
)

// Overrides are a team's reviewed decisions about an import (--classify).
type Overrides struct {
	File       string
	Channel    string
	SourceRepo string
	Operators  []string
	Approvers  []string
	// Environments map a CI environment to a channel and its approvals.
	Environments map[string]EnvOverride
	// Jobs are keyed as written: a job key (path#id) or a bare job id.
	Jobs map[string]*JobOverride
}

// EnvOverride maps one CI environment.
type EnvOverride struct {
	Channel  string
	Approval int
	// set says approval was given (0 is a decision too).
	set bool
}

// JobOverride is the decision about one job.
type JobOverride struct {
	Class  string
	Reason string
	Name   string
	Cron   string
	TZ     string
	at     string // file:line of the entry
	line   int
	column int
	used   bool
}

// ParseOverrides reads a --classify file, reporting every problem with its
// position.
func ParseOverrides(file string, data []byte) (*Overrides, []Error) {
	o := &Overrides{File: file, Environments: map[string]EnvOverride{}, Jobs: map[string]*JobOverride{}}
	d := yamlpos.New(file, yamlOptions)
	body := d.Parse(data)
	if body == nil {
		return o, d.Errs
	}
	name := func(re *regexp.Regexp, dst *string) func(ast.Node, string) {
		return func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				if !re.MatchString(s) {
					d.Add(v, f, "must match %s", re)
					return
				}
				*dst = s
			}
		}
	}
	members := func(dst *[]string) func(ast.Node, string) {
		return func(v ast.Node, f string) {
			items, _ := d.List(v, f)
			for i, it := range items {
				if s, ok := d.Str(it, yamlpos.Index(f, i)); ok {
					if !memberRe.MatchString(s) {
						d.Add(it, yamlpos.Index(f, i), "must match %s", memberRe)
						continue
					}
					*dst = append(*dst, s)
				}
			}
		}
	}
	d.Object(body, "", 0, map[string]func(ast.Node, string){
		"defaults": func(v ast.Node, f string) {
			d.Object(v, f, 1, map[string]func(ast.Node, string){
				"channel":     name(channelRe, &o.Channel),
				"source_repo": name(repoRe, &o.SourceRepo),
			})
		},
		"groups": func(v ast.Node, f string) {
			d.Object(v, f, 1, map[string]func(ast.Node, string){
				GroupOperators: members(&o.Operators),
				GroupApprovers: members(&o.Approvers),
			})
		},
		"environments": func(v ast.Node, f string) {
			es, _ := d.Entries(v, f, 1)
			for _, e := range es {
				ef := yamlpos.Join(f, e.Key)
				var eo EnvOverride
				if e.Value == nil {
					d.Add(e.KeyNode, ef, "must be a mapping, got null")
					continue
				}
				d.Object(e.Value, ef, 2, map[string]func(ast.Node, string){
					"channel": name(channelRe, &eo.Channel),
					"approval": func(v ast.Node, f string) {
						if n, ok := d.Integer(v, f); ok {
							if n < 0 || n > 10 {
								d.Add(v, f, "must be between 0 and 10")
								return
							}
							eo.Approval, eo.set = int(n), true
						}
					},
				})
				o.Environments[e.Key] = eo
			}
		},
		"jobs": func(v ast.Node, f string) {
			es, _ := d.Entries(v, f, 1)
			for _, e := range es {
				jf := yamlpos.Join(f, e.Key)
				line, col := yamlpos.Position(e.KeyNode)
				jo := &JobOverride{at: fmt.Sprintf("%s:%d", file, line), line: line, column: col}
				if e.Value == nil {
					d.Add(e.KeyNode, jf, "must be a mapping, got null")
					continue
				}
				d.Object(e.Value, jf, 2, map[string]func(ast.Node, string){
					"class": func(v ast.Node, f string) {
						if s, ok := d.Str(v, f); ok {
							if !slices.Contains(Classes, s) {
								d.Add(v, f, "must be one of %s, got %q", strings.Join(Classes, ", "), s)
								return
							}
							jo.Class = s
						}
					},
					"reason": func(v ast.Node, f string) { jo.Reason, _ = d.Str(v, f) },
					"name":   name(nameRe, &jo.Name),
					"cron": func(v ast.Node, f string) {
						if s, ok := d.Str(v, f); ok {
							if _, err := cron.ParseStandard(s); err != nil || strings.Contains(s, "TZ=") {
								d.Add(v, f, "invalid cron expression %q", s)
								return
							}
							jo.Cron = s
						}
					},
					"tz": func(v ast.Node, f string) { jo.TZ, _ = d.Str(v, f) },
				})
				o.Jobs[e.Key] = jo
			}
		},
	})
	return o, d.Errs
}

// job finds the override of a job: by key, else by bare id.
func (o *Overrides) job(j *Job) (*JobOverride, bool) {
	if o == nil {
		return nil, false
	}
	if jo, ok := o.Jobs[j.Key]; ok {
		jo.used = true
		return jo, true
	}
	if jo, ok := o.Jobs[j.ID]; ok {
		jo.used = true
		return jo, true
	}
	return nil, false
}

// Check reports the entries of the file that name no job of the inventory,
// or a bare id that several jobs have: an override that silently applies
// to nothing is a decision lost.
func (o *Overrides) Check(inv *Inventory) []Error {
	if o == nil {
		return nil
	}
	byID := map[string]int{}
	keys := map[string]bool{}
	for _, j := range inv.Jobs {
		byID[j.ID]++
		keys[j.Key] = true
	}
	var errs []Error
	for _, k := range sortedKeys(o.Jobs) {
		jo := o.Jobs[k]
		switch {
		case keys[k]:
		case byID[k] == 1:
		case byID[k] > 1:
			errs = append(errs, Error{File: o.File, Line: jo.line, Column: jo.column, Field: "jobs." + k,
				Message: fmt.Sprintf("%d jobs have the id %q; name one as path#id", byID[k], k)})
		default:
			errs = append(errs, Error{File: o.File, Line: jo.line, Column: jo.column, Field: "jobs." + k,
				Message: "names no job of the inventory (jobs are named path#id, as `jobplane import` lists them)"})
		}
	}
	return errs
}

func (o *Overrides) channel() string {
	if o != nil && o.Channel != "" {
		return o.Channel
	}
	return DefaultChannel
}

func (o *Overrides) sourceRepo() string {
	if o != nil && o.SourceRepo != "" {
		return o.SourceRepo
	}
	return DefaultSourceRepo
}
