package ciimport

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Classes of CI jobs (seed of the migration plan: build/test stays in CI;
// operational and data-movement jobs are the first to move).
const (
	ClassBuildTest    = "build-test"
	ClassOperational  = "operational"
	ClassDataMovement = "data-movement"
)

// Classes lists the classes in the order they are shown.
var Classes = []string{ClassBuildTest, ClassOperational, ClassDataMovement}

// Confidence levels of a classification.
const (
	ConfidenceHigh   = "high"
	ConfidenceMedium = "medium"
	ConfidenceLow    = "low"
)

// Classification is the decision about one job.
type Classification struct {
	Class      string `json:"class"`
	Confidence string `json:"confidence"`
	// Scores are the summed weights of the evidence, per class.
	Scores   map[string]int `json:"scores"`
	Evidence []Evidence     `json:"evidence"`
	// Override is where the --classify file decided, file:line; the
	// evidence is still listed for the reviewer.
	Override string `json:"override,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Evidence is one fact that counted toward a class.
type Evidence struct {
	Class  string `json:"class"`
	Weight int    `json:"weight"`
	Fact   string `json:"fact"`
}

// Moves reports whether the job is written to the definitions repository:
// it is operational or data movement and is not only the body of a
// reusable workflow (its callers move with its steps).
func (j *Job) Moves() bool {
	return j.Class != nil && j.Class.Class != ClassBuildTest && !j.onlyCalled()
}

func (j *Job) onlyCalled() bool {
	if len(j.Triggers) == 0 {
		return false
	}
	for _, t := range j.Triggers {
		if t.Event != "workflow_call" {
			return false
		}
	}
	return true
}

var (
	buildRe = regexp.MustCompile(`\b(go (test|build|vet)|npm (test|ci|run (build|test|lint))|yarn (test|build|lint)|pnpm (test|build)|make (test|build|check|lint|all)|pytest|tox|cargo (test|build|clippy)|mvn|gradle|gradlew|jest|golangci-lint|eslint|docker build|bazel (test|build)|rspec|phpunit|dotnet (test|build)|coverage)\b`)
	opsRe   = regexp.MustCompile(`\b(migrate|migrations?|backfill\w*|flyway|liquibase|alembic|db:migrate|rake db|rotate|reindex|vacuum|purge|cleanup|reconcile|rails runner|invalidate)\b`)
	// dbClientRe are database clients: every kind of job uses them.
	dbClientRe = regexp.MustCompile(`\b(psql|mysql|mongosh|redis-cli)\b`)
	dataRe     = regexp.MustCompile(`\b(dbt|airbyte|meltano|spark-submit|bq (load|query|extract)|snowsql|etl|elt|aws s3 (cp|sync)|gsutil|rclone|pg_dump|pg_restore|mysqldump)\b`)
	// weakDataRe are words that suggest moving data but also mean other
	// things; they count for less.
	weakDataRe = regexp.MustCompile(`\b(sync|export|import|extract|transform|ingest|upload|download|curl)\b`)
	deployRe   = regexp.MustCompile(`\b(deploy\w*|helm (upgrade|install)|kubectl apply|terraform apply|cdk deploy|fly deploy)\b`)
	prodEnvRe  = regexp.MustCompile(`(?i)^(prod|production|live|prd)\b`)
	nameOpsRe  = regexp.MustCompile(`(?i)(migrat|backfill|cleanup|rotate|admin|maintenance|reindex|repair|fix)`)
	nameDataRe = regexp.MustCompile(`(?i)(sync|etl|elt|dbt|export|import|ingest|transform|warehouse|report|rollup)`)
	nameTestRe = regexp.MustCompile(`(?i)(^|[-_ :])(test|tests|lint|build|check|ci|unit|e2e|coverage)([-_ :]|$)`)
)

// Classify decides each job's class from its triggers, environment and
// commands, then applies the overrides.
func Classify(inv *Inventory, ov *Overrides) {
	for _, j := range inv.Jobs {
		j.Class = classify(j)
		if ov == nil {
			continue
		}
		if o, ok := ov.job(j); ok && o.Class != "" {
			j.Class.Class = o.Class
			j.Class.Confidence = ConfidenceHigh
			j.Class.Override = o.at
			j.Class.Reason = o.Reason
		}
	}
}

func classify(j *Job) *Classification {
	c := &Classification{Scores: map[string]int{}}
	add := func(class string, w int, format string, args ...any) {
		c.Evidence = append(c.Evidence, Evidence{Class: class, Weight: w, Fact: fmt.Sprintf(format, args...)})
		c.Scores[class] += w
	}
	pushed := false
	for _, t := range j.Triggers {
		switch t.Event {
		case "push", "pull_request", "pull_request_target", "merge_group", "merge_request":
			pushed = true
			add(ClassBuildTest, 3, "runs on every %s%s", strings.ReplaceAll(t.Event, "_", " "), branches(t))
		case "release", "tag":
			pushed = true
			add(ClassBuildTest, 2, "runs on %s (delivery)", t.Event)
		case "schedule":
			when := t.Cron
			if when == "" {
				when = cmp.Or(t.Detail, "set outside the file")
			}
			add(ClassOperational, 1, "runs on a schedule (%s)", when)
			add(ClassDataMovement, 1, "runs on a schedule (%s)", when)
		case "workflow_dispatch", "manual", "web":
			if len(t.Inputs) > 0 {
				names := make([]string, len(t.Inputs))
				for i, in := range t.Inputs {
					names[i] = in.Name
				}
				add(ClassOperational, 2, "started by hand with inputs %s", strings.Join(names, ", "))
			} else {
				add(ClassOperational, 1, "started by hand")
			}
		case "repository_dispatch", "api", "trigger":
			add(ClassOperational, 1, "started by an API call (%s)", t.Event)
		}
	}
	if len(j.Matrix) > 0 {
		add(ClassBuildTest, 2, "runs a matrix (%s)", strings.Join(j.Matrix, "; "))
	}
	if j.Environment != "" {
		if prodEnvRe.MatchString(j.Environment) {
			add(ClassOperational, 2, "runs in environment %s", j.Environment)
		} else {
			add(ClassOperational, 1, "runs in environment %s", j.Environment)
		}
	}
	if j.Concurrency != nil {
		add(ClassOperational, 1, "serialised by concurrency group %s", j.Concurrency.Group)
	}
	cmds := j.commands()
	score := func(re *regexp.Regexp, class string, w, limit int, what string) {
		n := 0
		for _, m := range distinctMatches(re, cmds) {
			if n == limit {
				break
			}
			add(class, w, "%s `%s`", what, m)
			n++
		}
	}
	score(buildRe, ClassBuildTest, 2, 2, "runs")
	score(opsRe, ClassOperational, 3, 2, "runs")
	score(dbClientRe, ClassOperational, 1, 1, "runs")
	score(dataRe, ClassDataMovement, 3, 2, "runs")
	score(weakDataRe, ClassDataMovement, 1, 2, "runs")
	if ms := distinctMatches(deployRe, cmds); len(ms) > 0 {
		if pushed {
			add(ClassBuildTest, 2, "deploys (`%s`) on push: delivery stays with the pipeline", ms[0])
		} else {
			add(ClassOperational, 2, "deploys (`%s`) when started by hand", ms[0])
		}
	}
	switch name := j.ID; {
	case nameOpsRe.MatchString(name):
		add(ClassOperational, 1, "named %q", name)
	case nameDataRe.MatchString(name):
		add(ClassDataMovement, 1, "named %q", name)
	case nameTestRe.MatchString(name):
		add(ClassBuildTest, 1, "named %q", name)
	case nameTestRe.MatchString(j.Stage):
		add(ClassBuildTest, 1, "in stage %q", j.Stage)
	}
	for _, s := range j.Steps {
		if s.Kind != StepUses {
			continue
		}
		u := strings.ToLower(s.Uses)
		if strings.HasPrefix(u, "codecov/") || strings.HasPrefix(u, "docker/build-push-action") || strings.HasPrefix(u, "actions/upload-artifact") {
			add(ClassBuildTest, 1, "uses %s", s.Uses)
		}
	}
	if len(j.CalledBy) > 0 {
		add(ClassOperational, 0, "body of a reusable workflow called by %s: moves with its callers", strings.Join(j.CalledBy, ", "))
	}
	decide(c)
	return c
}

// decide picks the class with the highest score and says how sure it is.
// A tie keeps the job in CI (build/test before the others): moving a job
// on a coin toss would be worse than leaving it.
func decide(c *Classification) {
	for _, cl := range Classes {
		c.Scores[cl] += 0
	}
	order := slices.Clone(Classes)
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(c.Scores[b], c.Scores[a]) })
	best, second := order[0], c.Scores[order[1]]
	top := c.Scores[best]
	margin := top - second
	switch {
	case top == 0:
		c.Class, c.Confidence = ClassBuildTest, ConfidenceLow
		c.Evidence = append(c.Evidence, Evidence{Class: ClassBuildTest, Fact: "no evidence either way: left in CI"})
		return
	case top >= 5 && margin >= 3:
		c.Confidence = ConfidenceHigh
	case margin >= 2:
		c.Confidence = ConfidenceMedium
	default:
		c.Confidence = ConfidenceLow
	}
	c.Class = best
}

func branches(t Trigger) string {
	if len(t.Branches) == 0 {
		return ""
	}
	return " (" + strings.Join(t.Branches, ", ") + ")"
}

// commands is the text the keyword rules read: the shell steps and the
// actions used.
func (j *Job) commands() string {
	var b strings.Builder
	for _, s := range j.Steps {
		b.WriteString(s.Run)
		b.WriteByte('\n')
		if s.Uses != "" {
			b.WriteString(s.Uses)
			b.WriteByte('\n')
		}
	}
	return strings.ToLower(b.String())
}

// distinctMatches returns each match once, in order of first appearance.
func distinctMatches(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllString(s, -1) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}
