package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/connector/broker"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
)

// TestConnectorsAndNoCredentialLeaks: connectors through processes. A
// postgres connector mints a login role per attempt, at read or write level
// as the job declares and the chosen policy rule grants, and the server drops
// the role after the run ends, or after the lease of a SIGKILLed worker runs
// out; a static connector releases the write set of secrets when granted.
// Secret values, minted passwords, run tokens and the admin DSN never show
// up in logs, audit events, run records, API answers (errors included) or
// the server's and worker's own output; the log shows *** where a job echoed
// them.
func TestConnectorsAndNoCredentialLeaks(t *testing.T) {
	t.Parallel()
	eachBackend(t, testConnectors)
}

func testConnectors(t *testing.T, b backend) {
	start := time.Now()
	pg := newScratchPG(t)
	dbDSN := b.dsn(t)

	e := &env{dir: t.TempDir(), defs: filepath.Join(t.TempDir(), "definitions")}
	dir := e.dir
	pgScript := func(name, after string) string {
		return fmt.Sprintf(`echo $$ >> %[1]s/pids; export PGCONNECT_TIMEOUT=5; W="$JOBPLANE_CONNECTOR_WAREHOUSE_DSN"; `+
			`printf '%%s\n%%s\n' "$W" "$JOBPLANE_RUN_TOKEN" > %[1]s/creds-%[2]s; `+
			`echo "dsn: $W"; echo "run token: $JOBPLANE_RUN_TOKEN"; `+
			`psql "$W" -v ON_ERROR_STOP=1 -Atc 'select count(*) from t' || exit 10; echo "select ok"; %[3]s`, dir, name, after)
	}
	insert := `psql "$W" -v ON_ERROR_STOP=1 -c 'insert into t values (1)' && echo "insert ok"`
	jobs := map[string]struct {
		j     job
		conns string
	}{
		"pg-read":            {job{name: "pg-read", script: pgScript("pg-read", insert)}, "warehouse: read"},
		"pg-write":           {job{name: "pg-write", script: pgScript("pg-write", insert)}, "warehouse: write"},
		"pg-write-ungranted": {job{name: "pg-write-ungranted", script: pgScript("pg-write-ungranted", insert)}, "warehouse: write"},
		"show-secrets": {job{name: "show-secrets", script: fmt.Sprintf(`echo $$ >> %[1]s/pids; B="$JOBPLANE_CONNECTOR_BILLING_TOKEN"; `+
			`printf '%%s\n%%s\n' "$B" "$JOBPLANE_RUN_TOKEN" > %[1]s/creds-show-secrets; `+
			`echo "billing token: $B"; echo "run token: $JOBPLANE_RUN_TOKEN"; echo "billing token on stderr: $B" >&2; `+
			`echo "billing token base64: $(printf %%s "$B" | base64 -w0)"; echo "run token base64: $(printf %%s "$JOBPLANE_RUN_TOKEN" | base64 -w0)"`, dir)},
			"billing: write"},
		// Its connector's admin DSN names a database that does not exist:
		// issuing fails, and the error travels to the log and run record.
		"pg-broken": {job{name: "pg-broken", script: fmt.Sprintf(`echo $$ >> %[1]s/pids; echo "should not start"`, dir)}, "broken: read"},
		// Holds a session (pg_sleep) so that the revocation must end it.
		"pg-hold": {job{name: "pg-hold", leaseTTL: "2s", script: fmt.Sprintf(`echo $$ >> %[1]s/pids; echo $$ > %[1]s/pgid-pg-hold; `+
			`export PGCONNECT_TIMEOUT=5; W="$JOBPLANE_CONNECTOR_WAREHOUSE_DSN"; printf '%%s\n%%s\n' "$W" "$JOBPLANE_RUN_TOKEN" > %[1]s/creds-pg-hold; `+
			`psql "$W" -v ON_ERROR_STOP=1 -Atc 'select pg_sleep(60)'; sleep 60`, dir)}, "warehouse: read"},
	}
	files := map[string]string{
		"groups.yaml": "groups:\n  operators:\n    members: [admin]\n",
		"policies/connectors.yaml": "rules:\n" +
			"  - id: writers\n    jobs: [pg-write, show-secrets]\n    users: [\"*\"]\n    grants: {warehouse: write, billing: write}\n" +
			"  - id: plain\n    jobs: [pg-read, pg-write-ungranted, pg-hold, pg-broken]\n    users: [\"*\"]\n",
		"connectors/warehouse.yaml": fmt.Sprintf("name: warehouse\ntype: postgres\nbindings:\n  prod:\n    secret: warehouse-admin-dsn\n    read_role: %s\n    write_role: %s\n",
			pg.readRole, pg.writeRole),
		"connectors/broken.yaml": fmt.Sprintf("name: broken\ntype: postgres\nbindings:\n  prod:\n    secret: broken-admin-dsn\n    read_role: %s\n",
			pg.readRole),
		"connectors/billing.yaml": "name: billing\ntype: static\nbindings:\n  prod:\n    read: {TOKEN: billing-read-token}\n    write: {TOKEN: billing-admin-token}\n",
	}
	for name, j := range jobs {
		files["jobs/"+name+".yaml"] = j.j.yaml() + "connectors: {" + j.conns + "}\n"
	}
	_, err := gitsync.InitRepo(e.defs, "main", files, "e2e connector definitions")
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, pid := range e.pids() {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})

	s := startServer(t, dbDSN, e)
	rec := &apiRecorder{next: http.DefaultTransport}
	s.admin.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: openapitest.Transport(t, rec)}

	billingRead := "billing-read-" + randHex(12)
	billingAdmin := "billing-admin-" + randHex(12)
	require.NoError(t, s.admin.SetSecret(s.ctx(), "warehouse-admin-dsn", "prod", pg.adminDSN))
	require.NoError(t, s.admin.SetSecret(s.ctx(), "billing-read-token", "", billingRead))
	require.NoError(t, s.admin.SetSecret(s.ctx(), "billing-admin-token", "prod", billingAdmin))
	brokenPassword := "brokenpw-" + randHex(10)
	brokenDSN := pg.dsn("postgres", brokenPassword, pg.db+"_missing")
	require.NoError(t, s.admin.SetSecret(s.ctx(), "broken-admin-dsn", "", brokenDSN))

	// Wrong requests carrying a secret value: refused, and the answer must
	// not repeat the value.
	for _, c := range []struct{ path, body string }{
		{"/v1/secrets/Bad%20Name", `{"value":` + strconv.Quote(billingAdmin) + `}`},
		{"/v1/secrets/billing-admin-token?channel=NOT%20A%20CHANNEL", `{"value":` + strconv.Quote(billingAdmin) + `}`},
		{"/v1/secrets/billing-admin-token", `{"value":` + strconv.Quote(billingAdmin) + ` x}`},
		{"/v1/secrets/billing-admin-token", `{"value":` + strconv.Quote(billingAdmin) + `,"extra":` + strconv.Quote(billingAdmin) + `}`},
	} {
		code, body := s.raw(rec, http.MethodPut, c.path, s.adminToken, c.body)
		require.True(t, code >= 400 && code < 500, "PUT %s %s: want 4xx, got %d %s", c.path, c.body, code, body)
	}

	w := startWorker(t, s, "worker-a", t.TempDir(), s.registrationToken())
	t.Logf("setup (scratch database, server, secrets, worker) took %s", time.Since(start).Round(time.Millisecond))

	// The four short runs, on the one worker (concurrency 1), in order.
	names := []string{"pg-read", "pg-write", "pg-write-ungranted", "show-secrets", "pg-broken"}
	runs := map[string]string{} // job → run ID
	for _, n := range names {
		runs[n] = s.createRun(n).ID
	}
	final := map[string]*protocol.Run{}
	roleOf := map[string]string{}
	goneAfter := map[string]time.Duration{} // run end → role seen gone
	eventually(t, 45*time.Second, "every run ended and its minted role dropped", func() (bool, string) {
		var pending []string
		for _, n := range names {
			if _, ok := goneAfter[n]; ok {
				continue
			}
			r := final[n]
			if r == nil {
				got, err := s.admin.GetRun(s.ctx(), runs[n])
				if err != nil {
					pending = append(pending, n+": "+err.Error())
					continue
				}
				if !terminal(got.State) {
					pending = append(pending, runSummary(got))
					continue
				}
				final[n], r = got, got
			}
			if n == "show-secrets" || n == "pg-broken" { // nothing minted
				goneAfter[n] = 0
				continue
			}
			require.Len(t, r.Attempts, 1, runSummary(r))
			role := broker.RoleName(r.Attempts[0].ID, "warehouse")
			roleOf[n] = role
			if pg.roleExists(t, role) {
				pending = append(pending, n+": role "+role+" still exists")
				continue
			}
			require.NotNil(t, r.FinishedAt, runSummary(r))
			goneAfter[n] = time.Since(*r.FinishedAt)
		}
		return len(pending) == 0, strings.Join(pending, "; ")
	})
	for _, n := range names {
		t.Logf("%s: %s, %s; role %s gone %s after the run ended", n, final[n].State, runSummary(final[n]), roleOf[n], goneAfter[n].Round(time.Millisecond))
		require.Less(t, goneAfter[n], 10*time.Second, "%s: role %s outlived its run by more than 10 s", n, roleOf[n])
	}

	logs := map[string][]protocol.RunLogLine{}
	logText := func(n string) string {
		var b strings.Builder
		for _, l := range logs[n] {
			b.WriteString(l.Stream + ": " + l.Text + "\n")
		}
		return b.String()
	}
	for _, n := range names {
		logs[n] = s.allLogs(runs[n])
	}
	credsOf := func(n string) (first, token string) {
		l := e.lines("creds-" + n)
		require.Len(t, l, 2, "creds-%s: %v", n, l)
		return l[0], l[1]
	}

	// Read level: select works, insert is refused.
	for _, n := range []string{"pg-read", "pg-write-ungranted"} {
		r := final[n]
		require.Equal(t, "failed", r.State, "%s: %s\n%s", n, runSummary(r), logText(n))
		require.Contains(t, logText(n), "stdout: select ok\n", n)
		require.Contains(t, logText(n), "permission denied", n)
		require.NotContains(t, logText(n), "stdout: insert ok\n", n)
	}
	require.Equal(t, "succeeded", final["pg-write"].State, "%s\n%s", runSummary(final["pg-write"]), logText("pg-write"))
	require.Contains(t, logText("pg-write"), "stdout: insert ok\n")
	require.Equal(t, 1, pg.count(t), "only pg-write inserted a row")
	for _, n := range []string{"pg-read", "pg-write", "pg-write-ungranted"} {
		dsn, _ := credsOf(n)
		u, err := url.Parse(dsn)
		require.NoError(t, err, n)
		require.Equal(t, roleOf[n], u.User.Username(), "%s: the DSN logs in as the attempt's minted role", n)
		pw, ok := u.User.Password()
		require.True(t, ok && len(pw) >= 16, "%s: the DSN carries a minted password", n)
		require.Equal(t, "/"+pg.db, u.Path, n)
		require.Contains(t, logText(n), "stdout: dsn: ***\n", "%s: the DSN is masked", n)
		require.Contains(t, logText(n), "stdout: run token: ***\n", "%s: the run token is masked", n)
	}
	// A connector that cannot be issued stops the job before it starts,
	// with an error that names the connector.
	r := final["pg-broken"]
	require.Equal(t, "failed", r.State, "%s\n%s", runSummary(r), logText("pg-broken"))
	require.Contains(t, logText("pg-broken"), "system: jobplane: cannot start job: fetch connector credentials:")
	require.Contains(t, logText("pg-broken"), `connector "broken"`)
	require.NotContains(t, logText("pg-broken"), "stdout: should not start")
	require.Contains(t, string(r.Attempts[0].Result), "broken")
	require.Empty(t, e.lines("creds-pg-broken"))
	t.Logf("pg-broken: %s\n%s", runSummary(r), logText("pg-broken"))

	// Grants follow the chosen rule.
	grants := func(n string) map[string]string {
		var g map[string]string
		if raw := final[n].Grants; len(raw) > 0 && string(raw) != "null" {
			require.NoError(t, json.Unmarshal(raw, &g), n)
		}
		return g
	}
	require.Equal(t, map[string]string{"warehouse": "write", "billing": "write"}, grants("pg-write"))
	require.Equal(t, map[string]string{"warehouse": "write", "billing": "write"}, grants("show-secrets"))
	require.Empty(t, grants("pg-read"))
	require.Empty(t, grants("pg-write-ungranted"))

	// The static connector at write level hands out the write set.
	r = final["show-secrets"]
	require.Equal(t, "succeeded", r.State, "%s\n%s", runSummary(r), logText("show-secrets"))
	billingGot, _ := credsOf("show-secrets")
	require.Equal(t, billingAdmin, billingGot, "billing: write granted → the write set's TOKEN")
	for _, want := range []string{"stdout: billing token: ***\n", "stdout: run token: ***\n",
		"stderr: billing token on stderr: ***\n", "stdout: billing token base64: ***\n", "stdout: run token base64: ***\n"} {
		require.Contains(t, logText("show-secrets"), want, "show-secrets log")
	}

	// The ended runs' tokens no longer fetch anything, and the refusals do
	// not repeat them.
	for _, n := range names[:4] {
		_, tok := credsOf(n)
		for _, presented := range []string{tok, tok + "x", tok[:len(tok)/2]} {
			code, body := s.raw(rec, http.MethodGet, "/v1/run/connectors", presented, "")
			require.True(t, code >= 400 && code < 500, "%s: connectors with an ended run's token: %d %s", n, code, body)
		}
	}
	code, body := s.raw(rec, http.MethodGet, "/v1/run/connectors", s.adminToken, "")
	require.True(t, code >= 400 && code < 500, "connectors with the admin token: %d %s", code, body)

	// A SIGKILLed worker's role is dropped once its lease (2 s) runs out,
	// and the session the job held is ended.
	holdID := s.createRun("pg-hold").ID
	runs["pg-hold"] = holdID
	hr := s.waitRun(holdID, 20*time.Second, "pg-hold leased and its job started", func(r *protocol.Run) bool {
		return len(r.Attempts) == 1 && r.Attempts[0].State == "leased" && len(e.lines("creds-pg-hold")) == 2 && len(e.lines("pgid-pg-hold")) == 1
	})
	holdRole := broker.RoleName(hr.Attempts[0].ID, "warehouse")
	eventually(t, 10*time.Second, "pg-hold's session in pg_stat_activity", func() (bool, string) {
		n := pg.sessions(t, holdRole)
		return n > 0, fmt.Sprintf("%d sessions of %s", n, holdRole)
	})
	pgid, err := strconv.Atoi(e.lines("pgid-pg-hold")[0])
	require.NoError(t, err)
	w.proc.kill()
	// The job's supervisor ends the job with its worker; a job still
	// there is killed here so that only the lease decides what follows.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
		require.NoError(t, err)
	}
	killed := time.Now()
	eventually(t, 15*time.Second, "pg-hold's role "+holdRole+" dropped after the lease ran out", func() (bool, string) {
		if pg.roleExists(t, holdRole) {
			return false, fmt.Sprintf("role exists; %d sessions", pg.sessions(t, holdRole))
		}
		return true, ""
	})
	roleGone := time.Since(killed)
	require.Zero(t, pg.sessions(t, holdRole), "the held session was ended")
	hr = s.waitState(holdID, 15*time.Second, "succeeded", "failed", "cancelled", "timed_out", "expired")
	require.Equal(t, "expired", hr.Attempts[0].State, runSummary(hr))
	t.Logf("pg-hold: worker killed; role %s gone %s later; %s", holdRole, roleGone.Round(time.Millisecond), runSummary(hr))
	holdDSN, _ := credsOf("pg-hold")
	u, err := url.Parse(holdDSN)
	require.NoError(t, err)
	require.Equal(t, holdRole, u.User.Username())
	logs["pg-hold"] = s.allLogs(holdID)

	// ---- No credential anywhere ----
	leaks := newLeakScanner()
	leaks.add("secret billing-read-token", billingRead)
	leaks.add("secret billing-admin-token", billingAdmin)
	leaks.add("admin DSN", pg.adminDSN)
	leaks.add("admin DSN password", pg.adminPassword)
	leaks.add("broken admin DSN", brokenDSN)
	leaks.add("broken admin DSN password", brokenPassword)
	for n := range runs {
		if n == "pg-broken" {
			continue
		}
		first, tok := credsOf(n)
		leaks.add(n+" run token", tok)
		if strings.HasPrefix(first, "postgres") {
			u, err := url.Parse(first)
			require.NoError(t, err)
			pw, _ := u.User.Password()
			leaks.add(n+" DSN", first)
			leaks.add(n+" minted password", pw)
		}
	}
	// The scanner finds what the jobs saw (a check of the check).
	for n := range runs {
		if n != "pg-broken" {
			b, _ := os.ReadFile(e.path("creds-" + n))
			require.NotEmpty(t, leaks.found(string(b)), "creds-%s", n)
		}
	}
	// (a) every log line of every run.
	for n := range runs {
		for _, l := range logs[n] {
			leaks.check(t, fmt.Sprintf("log of %s line %d", n, l.ID), l.Text)
		}
	}
	// (b) every audit event.
	var after int64
	events := 0
	actions := map[string]int{}
	issued := map[string]string{} // run ID → connector levels
	for range 1000 {
		page, err := s.admin.Audit(s.ctx(), after, 100)
		require.NoError(t, err)
		if len(page.Events) == 0 {
			break
		}
		for _, ev := range page.Events {
			events++
			actions[ev.Action]++
			raw, err := json.Marshal(ev)
			require.NoError(t, err)
			leaks.checkJSON(t, fmt.Sprintf("audit event %d (%s)", ev.Seq, ev.Action), raw)
			if ev.Action == "connector.issued" {
				issued[ev.Subject] = string(ev.Details)
			}
		}
		after = page.Next
	}
	t.Logf("audit: %d events %v", events, actions)
	require.Equal(t, 4, actions["secret.set"], "four secrets set; the refused requests set none")
	require.Equal(t, 5, actions["connector.issued"], "pg-broken's failed issue is not recorded as issued")
	for n, lvl := range map[string]string{"pg-read": `"warehouse":"read"`, "pg-write": `"warehouse":"write"`,
		"pg-write-ungranted": `"warehouse":"read"`, "show-secrets": `"billing":"write"`, "pg-hold": `"warehouse":"read"`} {
		require.Contains(t, strings.ReplaceAll(issued[runs[n]], " ", ""), lvl, "audit connector.issued of %s", n)
	}
	// (c) every run record, and the run list.
	for n, id := range runs {
		code, body := s.raw(rec, http.MethodGet, "/v1/runs/"+id, s.adminToken, "")
		require.Equal(t, http.StatusOK, code, "%s: %s", n, body)
		leaks.checkJSON(t, "run record of "+n, []byte(body))
	}
	code, body = s.raw(rec, http.MethodGet, "/v1/runs?limit=100", s.adminToken, "")
	require.Equal(t, http.StatusOK, code, body)
	leaks.checkJSON(t, "run list", []byte(body))
	// (d) the server's and the worker's own output.
	leaks.check(t, "server output", s.proc.output())
	leaks.check(t, "worker output", w.proc.output())
	// (e) every answer of the API to this test, errors and all.
	answers := rec.all()
	errs := 0
	for _, a := range answers {
		if a.status >= 400 {
			errs++
		}
		leaks.checkJSON(t, fmt.Sprintf("API answer %s %s → %d", a.method, a.path, a.status), a.body)
	}
	// (f) SQLite: the database file itself holds no plaintext.
	if strings.HasPrefix(dbDSN, "sqlite:") {
		p := strings.TrimPrefix(dbDSN, "sqlite:")
		for _, f := range []string{p, p + "-wal"} {
			if data, err := os.ReadFile(f); err == nil {
				leaks.check(t, "database file "+filepath.Base(f), string(data))
			}
		}
	}
	t.Logf("no leak of %d values (each also in 2 base64 forms) in %d log lines, %d audit events, %d run records, server and worker output, %d API answers (%d errors); total %s",
		len(leaks.values)/3, countLines(logs), events, len(runs), len(answers), errs, time.Since(start).Round(time.Millisecond))
}

func terminal(state string) bool {
	return slices.Contains([]string{"succeeded", "failed", "cancelled", "timed_out", "expired", "rejected"}, state)
}

func countLines(logs map[string][]protocol.RunLogLine) int {
	n := 0
	for _, l := range logs {
		n += len(l)
	}
	return n
}

// ---------------------------------------------------------------------------
// A scratch PostgreSQL database and roles for the postgres connector

type scratchPG struct {
	db, readRole, writeRole string
	adminDSN, adminPassword string
	super                   string // superuser DSN of the "postgres" database
}

// newScratchPG makes database jp_e2e_<rand> with table t(x int), a role
// wr_<rand> that may read t and ww_<rand> that may also insert; all are
// dropped at cleanup, after checking that no login role minted into them is
// left. Without PostgreSQL the test skips, unless
// JOBPLANE_TEST_REQUIRE_POSTGRES=1 (as testdb).
func newScratchPG(t *testing.T) *scratchPG {
	t.Helper()
	sfx := randHex(6)
	p := &scratchPG{db: "jp_e2e_" + sfx, readRole: "wr_" + sfx, writeRole: "ww_" + sfx,
		super: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"}
	// CREATE and DROP DATABASE write and sync a whole database: on a
	// loaded two-core machine that has taken longer than 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	conn, err := pgx.Connect(pctx, p.super)
	pcancel()
	if err != nil {
		msg := "no PostgreSQL at 127.0.0.1:5432 for the postgres connector: " + err.Error()
		if os.Getenv("JOBPLANE_TEST_REQUIRE_POSTGRES") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		"CREATE DATABASE " + p.db,
		"CREATE ROLE " + p.readRole + " NOLOGIN",
		"CREATE ROLE " + p.writeRole + " NOLOGIN",
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() { p.drop(t) })
	dbc, err := pgx.Connect(ctx, p.dsn("postgres", "", p.db))
	require.NoError(t, err)
	defer dbc.Close(context.Background())
	for _, q := range []string{
		"CREATE TABLE t (x int)",
		"GRANT SELECT ON t TO " + p.readRole,
		"GRANT SELECT, INSERT ON t TO " + p.writeRole,
	} {
		_, err := dbc.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	// A decoy password makes the admin DSN's text more distinctive, and
	// gives the leak check a password to look for; the local server trusts
	// postgres, so it is never asked for. Without trust, use the brief's
	// password-less form.
	p.adminPassword = "adminpw-" + randHex(10)
	p.adminDSN = p.dsn("postgres", p.adminPassword, p.db)
	if c, err := pgx.Connect(ctx, p.adminDSN); err == nil {
		c.Close(context.Background())
	} else {
		p.adminPassword = ""
		p.adminDSN = p.dsn("postgres", "", p.db)
	}
	return p
}

func (p *scratchPG) dsn(user, password, db string) string {
	u := url.URL{Scheme: "postgres", Host: "127.0.0.1:5432", Path: "/" + db, RawQuery: "sslmode=disable"}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	return u.String()
}

func (p *scratchPG) query(t *testing.T, db string, q string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.dsn("postgres", "", db))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(ctx, q, args...).Scan(&n), q)
	return n
}

func (p *scratchPG) roleExists(t *testing.T, role string) bool {
	return p.query(t, "postgres", `SELECT count(*) FROM pg_roles WHERE rolname = $1`, role) > 0
}

func (p *scratchPG) sessions(t *testing.T, role string) int {
	return p.query(t, "postgres", `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, role)
}

func (p *scratchPG) count(t *testing.T) int {
	return p.query(t, p.db, `SELECT count(*) FROM t`)
}

// drop removes the scratch database and roles. Minted roles still members
// of the read or write role are a failure (the broker should have dropped
// them); they are dropped too, so nothing is left in the cluster.
func (p *scratchPG) drop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.super)
	if err != nil {
		t.Errorf("cleanup: connect: %v", err)
		return
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT m.rolname FROM pg_auth_members am JOIN pg_roles m ON m.oid = am.member
		JOIN pg_roles g ON g.oid = am.roleid WHERE g.rolname IN ($1, $2) ORDER BY 1`, p.readRole, p.writeRole)
	var left []string
	if err == nil {
		left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Errorf("cleanup: list members: %v", err)
	}
	if len(left) > 0 {
		t.Errorf("minted login roles left behind: %v", left)
	}
	qs := []string{"DROP DATABASE IF EXISTS " + p.db + " WITH (FORCE)"}
	for _, r := range left {
		qs = append(qs, "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize())
	}
	qs = append(qs, "DROP ROLE IF EXISTS "+p.readRole, "DROP ROLE IF EXISTS "+p.writeRole)
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Errorf("cleanup: %s: %v", q, err)
		}
	}
}

// ---------------------------------------------------------------------------
// Recording the API's answers

type apiAnswer struct {
	method, path string
	status       int
	body         []byte
}

// apiRecorder keeps every answer the test's API client receives.
type apiRecorder struct {
	next    http.RoundTripper
	mu      sync.Mutex
	answers []apiAnswer
}

func (r *apiRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return nil, rerr
	}
	r.mu.Lock()
	r.answers = append(r.answers, apiAnswer{method: req.Method, path: req.URL.RequestURI(), status: resp.StatusCode, body: body})
	r.mu.Unlock()
	return resp, nil
}

func (r *apiRecorder) all() []apiAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.answers)
}

// raw sends one request with a bearer token through the recorder and
// returns the status and body.
func (s *server) raw(rec *apiRecorder, method, path, token, body string) (int, string) {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(s.ctx(), method, s.url+path, rd)
	require.NoError(s.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: openapitest.Transport(s.t, rec)}).Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, string(b)
}

// ---------------------------------------------------------------------------
// Looking for credentials

type leakScanner struct {
	values map[string]string // label → value
}

func newLeakScanner() *leakScanner { return &leakScanner{values: map[string]string{}} }

// add registers a credential and its standard base64 forms (what the
// worker's masker also hides).
func (l *leakScanner) add(label, value string) {
	if value == "" {
		return
	}
	l.values[label] = value
	l.values[label+" (base64)"] = base64.StdEncoding.EncodeToString([]byte(value))
	l.values[label+" (base64, unpadded)"] = base64.RawStdEncoding.EncodeToString([]byte(value))
}

func (l *leakScanner) check(t *testing.T, where, text string) {
	t.Helper()
	for _, k := range l.found(text) {
		i := strings.Index(text, l.values[k])
		lo, hi := max(0, i-200), min(len(text), i+len(l.values[k])+200)
		t.Errorf("LEAK: %s found in %s: …%s…", k, where, text[lo:hi])
	}
}

// found returns the labels of the values text contains.
func (l *leakScanner) found(text string) []string {
	var out []string
	for k, v := range l.values {
		if strings.Contains(text, v) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// checkJSON checks the raw text and every string (key or value) of the
// decoded document, so JSON escaping cannot hide a value.
func (l *leakScanner) checkJSON(t *testing.T, where string, raw []byte) {
	t.Helper()
	l.check(t, where, string(raw))
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return
	}
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x + "\n")
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				b.WriteString(k + "\n")
				walk(e)
			}
		}
	}
	walk(v)
	l.check(t, where+" (decoded)", b.String())
}
