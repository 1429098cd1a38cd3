package catalog

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const minimalJob = "name: hello\nrun:\n  command: [echo, hi]\n"

func files(kv ...string) map[string][]byte {
	m := map[string][]byte{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = []byte(kv[i+1])
	}
	return m
}

// requireJobError parses the minimal job with extra appended and requires
// exactly one error, at line and col of jobs/hello.yaml, naming field, with
// a message containing msg.
func requireJobError(t *testing.T, extra string, line, col int, field, msg string) {
	t.Helper()
	_, errs := Parse(files("jobs/hello.yaml", minimalJob+extra))
	require.Len(t, errs, 1, "%s: %v", extra, errs)
	e := errs[0]
	require.Equal(t, "jobs/hello.yaml", e.File, extra)
	require.Equal(t, [2]int{line, col}, [2]int{e.Line, e.Column}, "%s: %v", extra, e)
	require.Equal(t, field, e.Field, "%s: %v", extra, e)
	require.Contains(t, e.Message, msg, extra)
}

func mustParse(t *testing.T, m map[string][]byte) *Catalog {
	t.Helper()
	c, errs := Parse(m)
	require.Empty(t, errs)
	require.NotNil(t, c)
	return c
}

func TestParseErrors(t *testing.T) {
	t.Parallel()

	const groups = "groups:\n  ops: {members: [alice]}\n"
	type want struct {
		file      string
		line, col int
		field     string
		msg       string // substring
	}
	tests := []struct {
		name  string
		files map[string][]byte
		want  []want
	}{
		{"unknown top-level key", files("jobs/hello.yaml", minimalJob+"colour: blue\n"),
			[]want{{"jobs/hello.yaml", 4, 1, "colour", `unknown field "colour"`}}},
		{"unknown nested key", files("jobs/hello.yaml", "name: hello\nrun:\n  command: [x]\n  comand: [y]\n"),
			[]want{{"jobs/hello.yaml", 4, 3, "run.comand", `unknown field "comand"`}}},
		{"unknown key in flow mapping", files("jobs/hello.yaml", minimalJob+"runs_on: {pool: a, label: [x]}\n"),
			[]want{{"jobs/hello.yaml", 4, 20, "runs_on.label", "unknown field"}}},
		{"name differs from file", files("jobs/hello.yaml", "name: bye\nrun: {command: [x]}\n"),
			[]want{{"jobs/hello.yaml", 1, 7, "name", `must equal the file name "hello"`}}},
		{"missing name and run", files("jobs/hello.yaml", "description: x\n"),
			[]want{{"jobs/hello.yaml", 1, 1, "name", "is required"}, {"jobs/hello.yaml", 1, 1, "run", "is required"}}},
		{"missing command", files("jobs/hello.yaml", "name: hello\nrun:\n  timeout: 1m\n"),
			[]want{{"jobs/hello.yaml", 3, 3, "run.command", "is required"}}},
		{"empty command", files("jobs/hello.yaml", "name: hello\nrun: {command: []}\n"),
			[]want{{"jobs/hello.yaml", 2, 16, "run.command", "must not be empty"}}},
		{"command not strings", files("jobs/hello.yaml", "name: hello\nrun: {command: [echo, 3]}\n"),
			[]want{{"jobs/hello.yaml", 2, 23, "run.command[1]", "must be a string, got an integer"}}},
		{"bad durations and bounds", files("jobs/hello.yaml", "name: hello\nrun:\n  command: [x]\n  timeout: 10 minutes\n  lease_ttl: 1s\nretries: {max_attempts: 0, backoff: 5}\n"),
			[]want{
				{"jobs/hello.yaml", 4, 12, "run.timeout", "invalid duration"},
				{"jobs/hello.yaml", 5, 14, "run.lease_ttl", "between 2s and 1h0m0s"},
				{"jobs/hello.yaml", 6, 25, "retries.max_attempts", "between 1 and 100"},
				{"jobs/hello.yaml", 6, 37, "retries.backoff", "must be a duration"},
			}},
		{"zero timeout", files("jobs/hello.yaml", "name: hello\nrun: {command: [x], timeout: 0s}\n"),
			[]want{{"jobs/hello.yaml", 2, 30, "run.timeout", "greater than 0"}}},
		{"too many attempts", files("jobs/hello.yaml", minimalJob+"retries:\n  max_attempts: 101\n"),
			[]want{{"jobs/hello.yaml", 5, 17, "retries.max_attempts", "between 1 and 100"}}},
		{"reserved env", files("jobs/hello.yaml", "name: hello\nrun:\n  command: [x]\n  env:\n    JOBPLANE_X: a\n    OK: 1\n"),
			[]want{
				{"jobs/hello.yaml", 5, 5, "run.env.JOBPLANE_X", "reserved"},
				{"jobs/hello.yaml", 6, 9, "run.env.OK", "must be a string"},
			}},
		{"bad schema pattern", files("jobs/hello.yaml", minimalJob+"params:\n  type: object\n  properties:\n    a: {type: string, pattern: \"(\"}\n"),
			[]want{{"jobs/hello.yaml", 7, 32, "params", "is not valid regex"}}},
		{"schema against metaschema", files("jobs/hello.yaml", minimalJob+"params:\n  type: object\n  properties:\n    a:\n      type: 12\n"),
			[]want{{"jobs/hello.yaml", 8, 13, "params", "invalid schema"}}},
		{"schema not for an object", files("jobs/hello.yaml", minimalJob+"params:\n  type: string\n"),
			[]want{{"jobs/hello.yaml", 5, 9, "params.type", "must be object"}}},
		{"schema external ref", files("jobs/hello.yaml", minimalJob+"params:\n  $ref: file:///etc/passwd\n"),
			[]want{{"jobs/hello.yaml", 5, 3, "params", "external references are not allowed"}}},
		{"lease keys", files("jobs/hello.yaml", minimalJob+"leases:\n  - key: \"a:{params.nope}\"\n  - key: \"a b\"\n  - key: \"{when}\"\n  - on_conflict: wait\n"),
			[]want{
				{"jobs/hello.yaml", 5, 10, "leases[0].key", "names no property of params"},
				{"jobs/hello.yaml", 6, 10, "leases[1].key", "may contain only"},
				{"jobs/hello.yaml", 7, 10, "leases[2].key", "unknown placeholder {when}"},
				{"jobs/hello.yaml", 8, 5, "leases[3].key", "is required"},
				{"jobs/hello.yaml", 8, 18, "leases[3].on_conflict", "queue or reject"},
			}},
		{"connectors and artifacts", files("jobs/hello.yaml", minimalJob+"connectors: {db: admin}\nartifacts:\n  - {name: a.txt}\n  - {name: a.txt, max_bytes: 0}\n  - {role: x}\n"),
			[]want{
				{"jobs/hello.yaml", 4, 14, "connectors.db", `unknown connector "db"`},
				{"jobs/hello.yaml", 4, 18, "connectors.db", "read or write"},
				{"jobs/hello.yaml", 7, 12, "artifacts[1].name", "duplicate artifact name"},
				{"jobs/hello.yaml", 7, 30, "artifacts[1].max_bytes", "greater than 0"},
				{"jobs/hello.yaml", 8, 6, "artifacts[2].name", "is required"},
			}},
		{"schedule", files("jobs/hello.yaml", minimalJob+"params:\n  type: object\n  properties:\n    n: {type: integer}\nschedule:\n  cron: \"61 * * * *\"\n  params: {n: x}\n  catch_up: sometimes\n"),
			[]want{
				{"jobs/hello.yaml", 9, 3, "schedule.channel", "is required"},
				{"jobs/hello.yaml", 9, 9, "schedule.cron", "invalid cron expression"},
				{"jobs/hello.yaml", 10, 15, "schedule.params", "params.n:"},
				{"jobs/hello.yaml", 11, 13, "schedule.catch_up", "latest, none or all"},
			}},
		{"unknown owner group", files("jobs/hello.yaml", minimalJob+"owners: [ghosts]\n", "groups.yaml", groups),
			[]want{{"jobs/hello.yaml", 4, 10, "owners[0]", `unknown group "ghosts"`}}},
		{"bad file name", files("jobs/Hello.yaml", minimalJob),
			[]want{{"jobs/Hello.yaml", 0, 0, "", "must match"}}},
		{"yaml syntax", files("jobs/hello.yaml", "name: hello\nrun: {command: [x]\n"),
			[]want{{"jobs/hello.yaml", 2, 6, "", ""}}},
		{"two documents", files("jobs/hello.yaml", minimalJob+"---\nname: again\n"),
			[]want{{"jobs/hello.yaml", 5, 1, "", "one YAML document"}}},
		{"empty job", files("jobs/hello.yaml", "# nothing\n"),
			[]want{{"jobs/hello.yaml", 0, 0, "", "empty job definition"}}},
		{"not a mapping", files("jobs/hello.yaml", "- a\n- b\n"),
			[]want{{"jobs/hello.yaml", 1, 1, "", "must be a mapping, got a list"}}},
		{"duplicate key", files("jobs/hello.yaml", minimalJob+"name: hello\n"),
			[]want{{"jobs/hello.yaml", 4, 1, "", "already defined"}}},
		{"tags refused", files("jobs/hello.yaml", "name: !!str hello\nrun: {command: [x]}\n"),
			[]want{{"jobs/hello.yaml", 1, 7, "name", "tags are not supported"}}},
		{"merge keys refused", files("jobs/hello.yaml", "base: &b {command: [x]}\n"),
			[]want{{"jobs/hello.yaml", 1, 1, "base", "unknown field"}, {"jobs/hello.yaml", 1, 1, "name", "is required"}, {"jobs/hello.yaml", 1, 1, "run", "is required"}}},
		{"too large", files("jobs/hello.yaml", minimalJob+"description: "+strings.Repeat("x", MaxFileSize)+"\n"),
			[]want{{"jobs/hello.yaml", 0, 0, "", "larger than"}}},
		{"deep nesting", files("jobs/hello.yaml", strings.Repeat("[", 200)+strings.Repeat("]", 200)),
			[]want{{"jobs/hello.yaml", 0, 0, "", "nesting deeper"}}},
		{"deep sequence", files("jobs/hello.yaml", strings.Repeat("- ", 100)+"x\n"),
			[]want{{"jobs/hello.yaml", 0, 0, "", "nesting deeper"}}},
		{"deep value", files("groups.yaml", "groups:\n  g:\n    attributes:\n      a: "+strings.Repeat("[", 100)+strings.Repeat("]", 100)+"\n"),
			[]want{{"groups.yaml", 4, 72, "groups.g.attributes.a" + strings.Repeat("[0]", 62), "nested deeper"}}},
		{"unknown group key", files("groups.yaml", "groups:\n  ops: {members: [a], admins: [b]}\n"),
			[]want{{"groups.yaml", 2, 23, "groups.ops.admins", "unknown field"}}},
		{"policy without principals", files("policies/a.yaml", "rules:\n  - id: r1\n    jobs: [\"*\"]\n"),
			[]want{{"policies/a.yaml", 2, 5, "rules[0]", "must name groups or users"}}},
		{"policy missing id and jobs", files("policies/a.yaml", "rules:\n  - users: [a]\n"),
			[]want{{"policies/a.yaml", 2, 5, "rules[0].id", "is required"}, {"policies/a.yaml", 2, 5, "rules[0].jobs", "is required"}}},
		{"policy unknown group and bad effect", files("groups.yaml", groups, "policies/a.yaml", "rules:\n  - id: r1\n    effect: maybe\n    jobs: [\"[\"]\n    groups: [ops, devs]\n"),
			[]want{
				{"policies/a.yaml", 3, 13, "rules[0].effect", "allow or deny"},
				{"policies/a.yaml", 4, 12, "rules[0].jobs[0]", "invalid job name or glob"},
				{"policies/a.yaml", 5, 19, "rules[0].groups[1]", `unknown group "devs"`},
			}},
		{"duplicate rule ids across files", files("policies/a.yaml", "rules:\n  - {id: r1, jobs: [x], users: [a]}\n", "policies/b.yaml", "rules:\n  - id: r1\n    jobs: [y]\n    users: [b]\n"),
			[]want{{"policies/b.yaml", 2, 9, "rules[0].id", `duplicate rule id "r1" (first defined at policies/a.yaml:2)`}}},
		{"policy engine fields", files("groups.yaml", groups, "policies/a.yaml", "rules:\n  - id: r1\n    jobs: [x]\n    groups: [ops]\n    when: 'request.chanel == \"prod\"'\n    hours: {tz: Mars/Olympus, from: \"25:00\", to: \"02:00\", days: [mon, funday]}\n    approval:\n      count: 0\n      groups: [nobody]\n    grants: {db: admin}\n"),
			[]want{
				{"policies/a.yaml", 5, 19, "rules[0].when", "undefined field 'chanel'"},
				{"policies/a.yaml", 6, 17, "rules[0].hours.tz", `unknown time zone "Mars/Olympus"`},
				{"policies/a.yaml", 6, 37, "rules[0].hours.from", "HH:MM"},
				{"policies/a.yaml", 6, 71, "rules[0].hours.days[1]", "funday"},
				{"policies/a.yaml", 8, 14, "rules[0].approval.count", "from 1 to"},
				{"policies/a.yaml", 9, 16, "rules[0].approval.groups[0]", `unknown group "nobody"`},
				{"policies/a.yaml", 10, 14, "rules[0].grants.db", "read or write"},
			}},
		{"when in a block scalar", files("groups.yaml", groups, "policies/a.yaml", "rules:\n  - id: r1\n    jobs: [x]\n    groups: [ops]\n    when: |\n      request.ref.protected &&\n        actor.nmae == \"x\"\n"),
			[]want{{"policies/a.yaml", 7, 14, "rules[0].when", "undefined field 'nmae'"}}},
		{"when is not a boolean", files("groups.yaml", groups, "policies/a.yaml", "rules:\n  - id: r1\n    jobs: [x]\n    groups: [ops]\n    when: request.job\n"),
			[]want{{"policies/a.yaml", 5, 11, "rules[0].when", "must be a boolean expression"}}},
		{"deny rules neither grant nor need approval", files("groups.yaml", groups, "policies/a.yaml", "rules:\n  - id: r1\n    effect: deny\n    jobs: [x]\n    groups: [ops]\n    approval: {count: 1, groups: [ops]}\n    grants: {db: read}\n"),
			[]want{
				{"policies/a.yaml", 6, 16, "rules[0].approval", "cannot require approval"},
				{"policies/a.yaml", 7, 14, "rules[0].grants", "cannot grant"},
			}},
		{"errors in several files are all reported", files("jobs/a.yaml", "name: a\n", "jobs/b.yaml", "name: b\nrun: {command: [x], x: 1}\n", "policies/p.yaml", "rulez: []\n"),
			[]want{
				{"jobs/a.yaml", 1, 1, "run", "is required"},
				{"jobs/b.yaml", 2, 21, "run.x", "unknown field"},
				{"policies/p.yaml", 1, 1, "rulez", "unknown field"},
				{"policies/p.yaml", 1, 1, "rules", "is required"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, errs := Parse(tt.files)
			require.Nil(t, c)
			require.Len(t, errs, len(tt.want), "Parse errors = %v", errs)
			for i, w := range tt.want {
				got := errs[i]
				require.Equal(t, w.file, got.File, "error %d: %v", i, got)
				require.Equal(t, w.line, got.Line, "error %d: %v", i, got)
				require.Equal(t, w.col, got.Column, "error %d: %v", i, got)
				require.Equal(t, w.field, got.Field, "error %d: %v", i, got)
				require.Contains(t, got.Message, w.msg, "error %d: %v", i, got)
			}
		})
	}
}

func TestParseAliasBomb(t *testing.T) {
	t.Parallel()

	var b strings.Builder
	b.WriteString("groups:\n  g:\n    attributes:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		b.WriteString("      a" + string(rune('a'+i)) + ": &a" + string(rune('a'+i)) + " [")
		prev := "a0"
		if i > 1 {
			prev = "a" + string(rune('a'+i-1))
		}
		for k := 0; k < 10; k++ {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*" + prev)
		}
		b.WriteString("]\n")
	}
	start := time.Now()
	c, errs := Parse(files("groups.yaml", b.String()))
	require.Nil(t, c)
	require.NotEmpty(t, errs)
	require.Contains(t, errs[0].Message, "after expanding aliases")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestParseAliasesAllowed(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("jobs/hello.yaml", "name: hello\ndescription: &x text\nrun:\n  command: [echo, *x]\n  env: {A: *x}\n"))
	j, _ := c.Job("hello")
	require.Equal(t, []string{"echo", "text"}, j.Run.Command)
	require.Equal(t, map[string]string{"A": "text"}, j.Run.Env)
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("jobs/hello.yaml", minimalJob, "notes/readme.md", "ignored", "jobs/sub/x.yaml", "::: ignored"))
	j, ok := c.Job("hello")
	require.True(t, ok)
	require.Equal(t, "jobs/hello.yaml", j.File)
	require.Equal(t, []string{"echo", "hi"}, j.Run.Command)
	require.Equal(t, time.Hour, j.Run.Timeout)
	require.Equal(t, 30*time.Second, j.Run.LeaseTTL)
	require.Equal(t, "default", j.RunsOn.Pool)
	require.Equal(t, 1, j.Retries.MaxAttempts)
	require.Equal(t, 10*time.Second, j.Retries.Backoff)
	require.Nil(t, j.Params)
	_, ok = c.Job("nope")
	require.False(t, ok)
}

const fullJob = `name: backfill-account
description: Recompute balances for one account
owners: [payments-leads]
runbook: runbooks/backfill-account.md
params:
  type: object
  required: [account]
  additionalProperties: false
  properties:
    account: {type: string, pattern: "^[0-9]{1,12}$"}
    dry_run: {type: boolean, default: true}
    items: {type: array, items: {type: integer}}
run:
  command: [sh, -c, 'echo "backfilling $JOBPLANE_PARAM_ACCOUNT"']
  env: {LOG_LEVEL: info}
  timeout: 1h30m
  lease_ttl: 45s
runs_on: {pool: big, labels: [linux]}
leases:
  - key: "backfill:account:{params.account}"
    on_conflict: reject
  - key: warehouse-writes
    limit: 4
  - key: "rollup:{window.date}"
    once: true
retries: {max_attempts: 3, backoff: 1m}
connectors: {warehouse: read}
artifacts:
  - {name: report.json, role: report, max_bytes: 1048576}
schedule: {cron: "0 2 * * *", tz: UTC, channel: prod, params: {account: "0"}}
`

const warehouseConnector = `name: warehouse
type: postgres
bindings:
  prod: {secret: warehouse-prod-admin-dsn, read_role: warehouse_read, write_role: warehouse_write}
`

const fullGroups = `groups:
  payments-operators:
    members: [alice, bob]
    attributes: {accounts: ["1001", "1002"]}
  payments-leads: {members: [carol, alice]}
  contractors: {members: [mallory]}
`

func TestParseFullJob(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("jobs/backfill-account.yaml", fullJob, "groups.yaml", fullGroups, "connectors/warehouse.yaml", warehouseConnector))
	j, _ := c.Job("backfill-account")
	require.Equal(t, 90*time.Minute, j.Run.Timeout)
	require.Equal(t, 45*time.Second, j.Run.LeaseTTL)
	require.Equal(t, map[string]string{"LOG_LEVEL": "info"}, j.Run.Env)
	require.Equal(t, RunsOn{Pool: "big", Labels: []string{"linux"}}, j.RunsOn)
	require.Equal(t, []Lease{
		{Key: "backfill:account:{params.account}", OnConflict: "reject", Limit: 1},
		{Key: "warehouse-writes", OnConflict: "queue", Limit: 4},
		{Key: "rollup:{window.date}", OnConflict: "queue", Limit: 1, Once: true},
	}, j.Leases)
	require.Equal(t, Retries{MaxAttempts: 3, Backoff: time.Minute}, j.Retries)
	require.Equal(t, map[string]string{"warehouse": "read"}, j.Connectors)
	require.Equal(t, []Artifact{{Name: "report.json", Role: "report", MaxBytes: 1 << 20}}, j.Artifacts)
	require.Equal(t, &Schedule{Cron: "0 2 * * *", TZ: "UTC", Channel: "prod", CatchUp: "latest",
		Params: json.RawMessage(`{"account":"0","dry_run":true}`)}, j.Schedule)
	require.Equal(t, []string{"payments-leads", "payments-operators"}, c.GroupsOf("alice"))
	require.Empty(t, c.GroupsOf("nobody"))
	g, _ := c.Group("payments-operators")
	require.Equal(t, map[string]any{"accounts": []any{"1001", "1002"}}, g.Attributes)
}

func TestJobsSorted(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files(
		"jobs/zeta.yaml", "name: zeta\nrun: {command: [x]}\n",
		"jobs/alpha.yaml", "name: alpha\nrun: {command: [x]}\n",
		"jobs/mid-1.yaml", "name: mid-1\nrun: {command: [x]}\n",
	))
	var names []string
	for _, j := range c.Jobs() {
		names = append(names, j.Name)
	}
	require.Equal(t, []string{"alpha", "mid-1", "zeta"}, names)
}

func TestValidateParams(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("jobs/backfill-account.yaml", fullJob, "groups.yaml", fullGroups, "jobs/plain.yaml", "name: plain\nrun: {command: [x]}\n", "connectors/warehouse.yaml", warehouseConnector))
	full, _ := c.Job("backfill-account")
	plain, _ := c.Job("plain")

	tests := []struct {
		name      string
		job       *Job
		raw       string
		want      string
		wantField string
		wantMsg   string
	}{
		{name: "defaults applied", job: full, raw: `{"account":"42"}`, want: `{"account":"42","dry_run":true}`},
		{name: "explicit value kept", job: full, raw: `{"dry_run":false,"account":"42"}`, want: `{"account":"42","dry_run":false}`},
		{name: "numbers kept exact", job: full, raw: `{"account":"1","items":[1,12345678901234567]}`, want: `{"account":"1","dry_run":true,"items":[1,12345678901234567]}`},
		{name: "missing required", job: full, raw: `{}`, wantField: "account", wantMsg: "is required"},
		{name: "null is empty", job: full, raw: `null`, wantField: "account", wantMsg: "is required"},
		{name: "pattern", job: full, raw: `{"account":"abc"}`, wantField: "account", wantMsg: "does not match pattern"},
		{name: "additional property", job: full, raw: `{"account":"1","extra":1}`, wantField: "extra", wantMsg: "is not allowed"},
		{name: "array item", job: full, raw: `{"account":"1","items":[1,"x"]}`, wantField: "items/1", wantMsg: "want integer"},
		{name: "wrong type of default override", job: full, raw: `{"account":"1","dry_run":"yes"}`, wantField: "dry_run", wantMsg: "want boolean"},
		{name: "not an object", job: full, raw: `[1]`, wantField: "", wantMsg: "must be a JSON object"},
		{name: "invalid JSON", job: full, raw: `{`, wantField: "", wantMsg: "invalid JSON"},
		{name: "no schema, no params", job: plain, raw: ``, want: `{}`},
		{name: "no schema, empty object", job: plain, raw: ` {} `, want: `{}`},
		{name: "no schema, params given", job: plain, raw: `{"b":1,"a":2}`, wantField: "a", wantMsg: "takes no params"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.job.ValidateParams(json.RawMessage(tt.raw))
			if tt.wantMsg == "" {
				require.NoError(t, err)
				require.JSONEq(t, tt.want, string(got))
				require.Equal(t, tt.want, string(got), "output is compact with sorted keys")
				return
			}
			var pe *ParamsError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tt.wantField, pe.Field, "ValidateParams(%s) = %v", tt.raw, err)
			require.Contains(t, pe.Message, tt.wantMsg)
		})
	}
}

func TestErrorString(t *testing.T) {
	t.Parallel()

	require.Equal(t, "jobs/a.yaml:3:5: run.timeout: bad", Error{File: "jobs/a.yaml", Line: 3, Column: 5, Field: "run.timeout", Message: "bad"}.Error())
	require.Equal(t, "jobs/a.yaml:0:0: bad", Error{File: "jobs/a.yaml", Message: "bad"}.Error())
	require.Equal(t, "params.account: is required", (&ParamsError{Field: "account", Message: "is required"}).Error())
}

func TestParamDefaultsSatisfyTheSchema(t *testing.T) {
	t.Parallel()
	_, errs := Parse(files("jobs/hello.yaml", "name: hello\nparams:\n  type: object\n  properties:\n    n: {type: integer, minimum: 1, default: 0}\n    s: {type: string, default: ok}\nrun: {command: [x]}\n"))
	require.Len(t, errs, 1)
	require.Equal(t, "jobs/hello.yaml", errs[0].File)
	require.Equal(t, 5, errs[0].Line)
	require.Equal(t, "params.properties.n.default", errs[0].Field)
	require.Contains(t, errs[0].Message, "default does not satisfy its schema")
}
