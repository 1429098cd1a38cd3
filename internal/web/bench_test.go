package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
	"github.com/jobplane/jobplane/internal/web"
)

const benchRuns = 10000

// BenchmarkRunsPage renders the runs page (server time: handler in, HTML
// out, no network) with 10,000 runs in the store, each with one attempt:
// the newest page, a filter that matches a few old runs, a filter by actor
// and a page deep in the list. Figures are in docs/benchmarks.md.
func BenchmarkRunsPage(b *testing.B) {
	for name, open := range map[string]func(testing.TB) store.Store{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		b.Run(name, func(b *testing.B) {
			st := open(b)
			h, cookie, deep := seedRuns(b, st)
			for _, c := range []struct{ name, path string }{
				{"newest", "/runs"},
				{"state=failed", "/runs?state=failed"},
				{"actor=carol", "/runs?actor=carol"},
				{"job+channel", "/runs?job=job-3&channel=staging"},
				{"deep page", "/runs?before=" + deep},
				{"rows fragment", "/runs/rows"},
			} {
				b.Run(c.name, func(b *testing.B) {
					req := httptest.NewRequest(http.MethodGet, c.path, nil)
					req.AddCookie(cookie)
					for b.Loop() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, req)
						if rec.Code != http.StatusOK {
							b.Fatalf("%s: %d %s", c.path, rec.Code, rec.Body.String())
						}
					}
				})
			}
		})
	}
}

func seedRuns(b *testing.B, st store.Store) (http.Handler, *http.Cookie, string) {
	b.Helper()
	ctx := context.Background()
	svc, err := control.New(control.Config{Store: st, Clock: clock.Real{}})
	if err != nil {
		b.Fatal(err)
	}
	const token = "jpt_bench-admin-token-0123456789"
	adm := admin.New(st, clock.Real{})
	adm.OnRunnersChanged(svc.RunnersChanged)
	if err := adm.EnsureAdmin(ctx, token); err != nil {
		b.Fatal(err)
	}
	tn, err := st.TenantEnsure(ctx, principal.DefaultTenant, nil)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	actors := []string{"alice", "bob", "scheduler"}
	deep := ""
	for start := 0; start < benchRuns; start += 500 {
		err := st.InTx(ctx, func(tx store.Tx) error {
			for i := start; i < start+500; i++ {
				at := t0.Add(time.Duration(i) * time.Second)
				r := &store.Run{ID: id.New(id.Run, at), Tenant: tn.ID, Job: fmt.Sprintf("job-%d", i%20), Channel: "prod", Ref: "main",
					Commit: "0123456789abcdef0123456789abcdef01234567", Params: json.RawMessage(`{"account":"1001","dry_run":true}`),
					Actor: actors[i%3], Source: json.RawMessage(`{"kind":"api"}`), State: store.RunSucceeded,
					Decision: json.RawMessage(`{"request":{"allowed":true,"rule":"r","explanation":"allowed"}}`), Grants: json.RawMessage(`{}`),
					LeaseKeys: json.RawMessage(`[]`), Spec: json.RawMessage(`{}`), MaxAttempts: 1, CreatedAt: at, UpdatedAt: at}
				switch {
				case i%1000 == 7:
					r.State = store.RunFailed
				case i%500 == 3:
					r.Channel = "staging"
				case i == 9997:
					r.Actor = "carol"
				}
				end := at.Add(3 * time.Second)
				r.FinishedAt = &end
				if err := tx.RunCreate(ctx, r); err != nil {
					return err
				}
				a := &store.Attempt{ID: id.New(id.Attempt, at), RunID: r.ID, Tenant: tn.ID, Number: 1, State: store.AttemptSucceeded,
					Pool: "default", LeaseTTL: 30 * time.Second, Timeout: time.Hour, NotBefore: at, CreatedAt: at,
					RunnerID: "rnr_bench", ClaimedAt: &at, EndedAt: &end, Result: json.RawMessage(`{"outcome":"succeeded","exit_code":0}`)}
				if err := tx.AttemptCreate(ctx, a); err != nil {
					return err
				}
				if i == benchRuns/2 {
					deep = r.ID
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	h := web.New(web.Config{Control: svc, Admin: adm, Audit: audit.NewLog(st), Auth: &authn.Authenticator{Store: st, Clock: clock.Real{}}})
	return h, &http.Cookie{Name: "jobplane_session", Value: token}, deep
}
