package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/store"
)

// t0 is the fixed "now" of the time-dependent cases.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time {
	t := t0.Add(d)
	return &t
}

// cmpOpts compares JSON by meaning: PostgreSQL's jsonb does not keep spacing.
var cmpOpts = []cmp.Option{
	cmp.Transformer("json", func(m json.RawMessage) any {
		if len(m) == 0 {
			return nil
		}
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			return string(m)
		}
		return v
	}),
	// Both stores read an empty list back as nil.
	cmp.Transformer("list", func(l []string) []string {
		if len(l) == 0 {
			return nil
		}
		return l
	}),
}

func requireEqual(t *testing.T, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got, cmpOpts...); d != "" {
		t.Fatalf("mismatch (-want +got):\n%s", d)
	}
}

// Exercise runs the conformance suite; newStore must return a fresh, empty store.
func Exercise(t *testing.T, newStore func(t *testing.T) store.Store) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Tenants", testTenants},
		{"PrincipalsAndTokens", testPrincipalsAndTokens},
		{"Runs", testRuns},
		{"RunList", testRunList},
		{"AttemptCreateAndUniqueness", testAttemptCreate},
		{"ClaimEligibility", testClaimEligibility}, {"ClaimScope", testClaimScope}, {"ClaimCapabilities", testClaimCapabilities}, {"AttemptForCall", testAttemptForCall}, {"AttemptsForCall", testAttemptsForCall}, {"AttemptClaimRun", testAttemptClaimRun}, {"AttemptClaimRuns", testAttemptClaimRuns}, {"RunCreateQueued", testRunCreateQueued}, {"AttemptRunUpdate", testAttemptRunUpdate}, {"BatchWrites", testBatchWrites}, {"RecordsKept", testRecordsKept}, {"RunsCreateQueued", testRunsCreateQueued}, {"UpdateInTx", testUpdateInTx}, {"PanicInTx", testPanicInTx}, {"ListByRuns", testListByRuns}, {"NonceInsertMany", testNonceInsertMany}, {"InTxNonce", testInTxNonce}, {"ReadCaches", testReadCaches},
		{"ClaimOrdering", testClaimOrdering},
		{"ClaimLeaseMath", testClaimLeaseMath},
		{"Renew", testRenew},
		{"ListExpired", testListExpired},
		{"Runners", testRunners},
		{"RegTokens", testRegTokens},
		{"RegTokenUseConcurrent", testRegTokenConcurrent},
		{"Nonces", testNonces},
		{"Logs", testLogs},
		{"Audit", testAudit}, {"AuditFilters", testAuditFilters}, {"AuditNewestFirst", testAuditNewestFirst}, {"AuditChain", testAuditChain}, {"AuditInTx", testAuditInTx}, {"AuditReadsConcurrent", testAuditReadsConcurrent},
		{"Now", testNow},
		{"InTxRollback", testInTxRollback},
		{"ForUpdate", testForUpdate},
		{"Wake", testWake},
		{"DoubleAssignment", testDoubleAssignment},
		{"Approvals", testApprovals},
		{"Secrets", testSecrets},
		{"SigningKeys", testSigningKeys},
		{"Credentials", testCredentials},
		{"Catalogs", testCatalogs},
		{"LeaseFencing", testLeaseFencing}, {"LeaseSemaphore", testLeaseSemaphore}, {"LeaseGroup", testLeaseGroup}, {"LeaseWaiters", testLeaseWaiters}, {"LeaseBlockWaiters", testLeaseBlockWaiters}, {"LeaseWakeStranded", testLeaseWakeStranded}, {"LeaseReleaseSkipsLockedWaiters", testLeaseReleaseSkipsLockedWaiters}, {"LeaseOnce", testLeaseOnce}, {"LeaseLiveRun", testLeaseLiveRun}, {"LeaseKeyLock", testLeaseKeyLock}, {"LeaseList", testLeaseList}, {"LeaseConcurrent", testLeaseConcurrent},
		{"Schedules", testSchedules},
		{"Artifacts", testArtifacts}, {"SourceTickets", testSourceTickets},
		{"SystemLease", testSystemLease}, {"Retention", testRetention}, {"LogPrune", testLogPrune}, {"LogArchives", testLogArchives}, {"ArtifactSweep", testArtifactSweep},
		{"ActionsDispatches", testActionsDispatches}, {"GitHubInstallations", testGitHubInstallations}, {"GitHubDeliveries", testGitHubDeliveries}, {"GitHubCheckOutbox", testGitHubCheckOutbox}, {"GitHubOpenCheckRuns", testGitHubOpenCheckRuns},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

// ---- fixtures ----

type fixture struct {
	s      store.Store
	tenant string
	n      int
}

func newFixture(t *testing.T, s store.Store) *fixture {
	t.Helper()
	tn, err := s.TenantEnsure(bg(), "acme", at(0))
	require.NoError(t, err)
	return &fixture{s: s, tenant: tn.ID}
}

func (f *fixture) run(t *testing.T, mod func(r *store.Run)) *store.Run {
	t.Helper()
	f.n++
	r := &store.Run{
		ID: id.New(id.Run, t0.Add(time.Duration(f.n)*time.Millisecond)), Tenant: f.tenant, Job: "migrate",
		Channel: "prod", Ref: "main", Commit: "abc123", Params: json.RawMessage(`{"n":1}`), Actor: "alice",
		Source: json.RawMessage(`{"kind":"api"}`), State: store.RunQueued, MaxAttempts: 3,
		CreatedAt: t0, UpdatedAt: t0,
	}
	if mod != nil {
		mod(r)
	}
	require.NoError(t, f.s.RunCreate(bg(), r))
	return r
}

func (f *fixture) attempt(t *testing.T, mod func(a *store.Attempt)) *store.Attempt {
	t.Helper()
	r := f.run(t, nil)
	a := &store.Attempt{
		ID: id.New(id.Attempt, t0.Add(time.Duration(f.n)*time.Millisecond)), RunID: r.ID, Tenant: f.tenant,
		Number: 1, State: store.AttemptQueued, Pool: "default", LeaseTTL: 30 * time.Second, Timeout: time.Hour,
		NotBefore: t0.Add(-time.Minute), CreatedAt: t0,
	}
	if mod != nil {
		mod(a)
	}
	require.NoError(t, f.s.AttemptCreate(bg(), a))
	return a
}

func claim(s store.Queries, tenant, pool string, labels []string, runner string, now *time.Time) (*store.Attempt, error) {
	return s.AttemptClaim(bg(), &store.AttemptClaimParams{
		Tenant: tenant, Pool: pool, RunnerLabels: labels, RunnerID: runner,
		LeaseDigest: "digest-" + runner, ClaimRequestID: "req-" + runner, Now: now,
	})
}

// ---- cases ----

func testTenants(t *testing.T, s store.Store) {
	ctx := bg()
	a, err := s.TenantEnsure(ctx, "acme", at(0))
	require.NoError(t, err)
	require.NotEmpty(t, a.ID)
	require.Equal(t, "acme", a.Name)
	require.True(t, a.CreatedAt.Equal(t0))
	b, err := s.TenantEnsure(ctx, "acme", at(time.Hour))
	require.NoError(t, err)
	requireEqual(t, a, b)
	c, err := s.TenantEnsure(ctx, "other", nil)
	require.NoError(t, err)
	require.NotEqual(t, a.ID, c.ID)
	got, err := s.TenantGetByID(ctx, a.ID)
	require.NoError(t, err)
	requireEqual(t, a, got)
	_, err = s.TenantGetByID(ctx, "tnt_missing")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testPrincipalsAndTokens(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	p := &store.Principal{ID: "prn_1", Tenant: f.tenant, Kind: "user", Name: "alice", Admin: true, CreatedAt: t0}
	require.NoError(t, s.PrincipalCreate(ctx, p))
	err := s.PrincipalCreate(ctx, &store.Principal{ID: "prn_2", Tenant: f.tenant, Kind: "user", Name: "alice"})
	require.ErrorIs(t, err, store.ErrAlreadyExists)
	got, err := s.PrincipalGetByName(ctx, f.tenant, "alice")
	require.NoError(t, err)
	requireEqual(t, p, got)
	_, err = s.PrincipalGetByName(ctx, f.tenant, "bob")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.PrincipalGetByName(ctx, "tnt_other", "alice")
	require.ErrorIs(t, err, store.ErrNotFound)

	tok := &store.APIToken{ID: "tok_1", PrincipalID: p.ID, Digest: "d1", ExpiresAt: at(time.Hour), CreatedAt: t0}
	require.NoError(t, s.APITokenCreate(ctx, tok))
	err = s.APITokenCreate(ctx, &store.APIToken{ID: "tok_2", PrincipalID: p.ID, Digest: "d1"})
	require.ErrorIs(t, err, store.ErrAlreadyExists)
	gt, gp, err := s.APITokenGetByDigest(ctx, "d1")
	require.NoError(t, err)
	requireEqual(t, tok, gt)
	requireEqual(t, p, gp)
	_, _, err = s.APITokenGetByDigest(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)

	// Another tenant cannot revoke it.
	require.ErrorIs(t, s.APITokenRevoke(ctx, "tnt_other", tok.ID, at(time.Second)), store.ErrNotFound)
	require.NoError(t, s.APITokenRevoke(ctx, p.Tenant, tok.ID, at(time.Minute)))
	require.NoError(t, s.APITokenRevoke(ctx, p.Tenant, tok.ID, at(time.Hour))) // the first revocation time stays
	gt, _, err = s.APITokenGetByDigest(ctx, "d1")
	require.NoError(t, err)
	require.NotNil(t, gt.RevokedAt)
	require.True(t, gt.RevokedAt.Equal(t0.Add(time.Minute)), "revoked at %v", gt.RevokedAt)
	require.ErrorIs(t, s.APITokenRevoke(ctx, p.Tenant, "tok_missing", nil), store.ErrNotFound)
}

func testRuns(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	r := f.run(t, func(r *store.Run) {
		r.IdempotencyKey = "k1"
		r.Reason = "because"
		r.Decision = json.RawMessage(`{"outcome": "allow", "rules": ["a", "b"]}`)
		r.Grants = json.RawMessage(`[{"connector":"db","level":"read"}]`)
		r.LeaseKeys = json.RawMessage(`["schema-migration:prod"]`)
		r.Spec = json.RawMessage(`{"image":"x"}`)
		r.WaitingFor = "lease"
	})
	got, err := s.RunGetByID(ctx, r.ID, false)
	require.NoError(t, err)
	requireEqual(t, r, got)

	// The idempotency key is unique per (tenant, actor) only.
	dup := *r
	dup.ID = id.New(id.Run, t0.Add(time.Hour))
	require.ErrorIs(t, s.RunCreate(ctx, &dup), store.ErrAlreadyExists)
	dup.Actor = "bob"
	require.NoError(t, s.RunCreate(ctx, &dup))
	got, err = s.RunGetByIdempotencyKey(ctx, f.tenant, "alice", "k1")
	require.NoError(t, err)
	require.Equal(t, r.ID, got.ID)
	_, err = s.RunGetByIdempotencyKey(ctx, f.tenant, "carol", "k1")
	require.ErrorIs(t, err, store.ErrNotFound)
	// Runs without a key never collide.
	f.run(t, nil)
	f.run(t, nil)
	_, err = s.RunGetByIdempotencyKey(ctx, f.tenant, "alice", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	// Same ID twice.
	again := *r
	again.IdempotencyKey = ""
	require.ErrorIs(t, s.RunCreate(ctx, &again), store.ErrAlreadyExists)

	r.State = store.RunSucceeded
	r.Decision = json.RawMessage(`{"outcome":"deny"}`)
	r.Grants = nil
	r.WaitingFor = ""
	r.CountedAttempts = 2
	r.CancelRequested = true
	r.UpdatedAt = t0.Add(time.Minute)
	r.FinishedAt = at(time.Minute)
	require.NoError(t, s.RunUpdate(ctx, r))
	got, err = s.RunGetByID(ctx, r.ID, false)
	require.NoError(t, err)
	requireEqual(t, r, got)

	_, err = s.RunGetByID(ctx, "run_missing", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, s.RunUpdate(ctx, &store.Run{ID: "run_missing", State: store.RunFailed}), store.ErrNotFound)

	// A zero CreatedAt takes the database clock.
	z := &store.Run{ID: id.New(id.Run, clock.Real{}.Now()), Tenant: f.tenant, Job: "j", Actor: "a", State: store.RunQueued}
	require.NoError(t, s.RunCreate(ctx, z))
	require.WithinDuration(t, clock.Real{}.Now(), z.CreatedAt, time.Minute)
}

func testRunList(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	var ids []string
	for i := range 7 {
		r := f.run(t, func(r *store.Run) {
			if i%2 == 1 {
				r.Job = "backfill"
			}
			if i == 6 {
				r.State = store.RunFailed
			}
			if i == 4 {
				r.Channel, r.Actor = "staging", "bob"
			}
		})
		ids = append(ids, r.ID)
	}
	other := &fixture{s: s, tenant: "tnt_other"}
	other.run(t, nil)

	listIDs := func(p store.RunListParams) []string {
		t.Helper()
		p.Tenant = f.tenant
		runs, err := s.RunList(ctx, &p)
		require.NoError(t, err)
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	rev := func(in ...string) []string {
		out := append([]string(nil), in...)
		sort.Sort(sort.Reverse(sort.StringSlice(out)))
		return out
	}
	require.Equal(t, rev(ids...), listIDs(store.RunListParams{Limit: 100}))
	page1 := listIDs(store.RunListParams{Limit: 3})
	require.Equal(t, rev(ids...)[:3], page1)
	page2 := listIDs(store.RunListParams{Limit: 3, Before: page1[2]})
	require.Equal(t, rev(ids...)[3:6], page2)
	page3 := listIDs(store.RunListParams{Limit: 3, Before: page2[2]})
	require.Equal(t, rev(ids...)[6:], page3)
	require.Equal(t, rev(ids[1], ids[3], ids[5]), listIDs(store.RunListParams{Job: "backfill", Limit: 10}))
	require.Equal(t, []string{ids[6]}, listIDs(store.RunListParams{State: string(store.RunFailed), Limit: 10}))
	require.Empty(t, listIDs(store.RunListParams{Job: "nope", Limit: 10}))
	require.Equal(t, []string{ids[4]}, listIDs(store.RunListParams{Channel: "staging", Limit: 10}))
	require.Equal(t, []string{ids[4]}, listIDs(store.RunListParams{Actor: "bob", Limit: 10}))
	require.Empty(t, listIDs(store.RunListParams{Actor: "bob", Job: "backfill", Limit: 10}))
}

func testAttemptCreate(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a := f.attempt(t, func(a *store.Attempt) {
		a.Labels = []string{"linux", "gpu"}
		a.Result = json.RawMessage(`{"x":1}`)
	})
	got, err := s.AttemptGetByID(ctx, a.ID, false)
	require.NoError(t, err)
	requireEqual(t, a, got)
	_, err = s.AttemptGetByID(ctx, "att_missing", false)
	require.ErrorIs(t, err, store.ErrNotFound)

	// RELIABILITY C8: a second live attempt of the same run is refused.
	second := &store.Attempt{ID: "att_second", RunID: a.RunID, Tenant: f.tenant, Number: 2,
		State: store.AttemptQueued, Pool: "default", LeaseTTL: time.Second, Timeout: time.Minute, NotBefore: t0}
	require.ErrorIs(t, s.AttemptCreate(ctx, second), store.ErrAlreadyExists)
	second.State = store.AttemptLeased
	require.ErrorIs(t, s.AttemptCreate(ctx, second), store.ErrAlreadyExists)
	// Same (run, number) is refused whatever the state.
	dupNum := *second
	dupNum.ID, dupNum.Number, dupNum.State = "att_dupnum", 1, store.AttemptFailed
	require.ErrorIs(t, s.AttemptCreate(ctx, &dupNum), store.ErrAlreadyExists)

	a.State = store.AttemptFailed
	a.EndedAt = at(time.Minute)
	a.Result = json.RawMessage(`{"exit":1}`)
	require.NoError(t, s.AttemptUpdate(ctx, a))
	second.State = store.AttemptQueued
	require.NoError(t, s.AttemptCreate(ctx, second))
	list, err := s.AttemptListByRun(ctx, a.RunID)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []string{a.ID, second.ID}, []string{list[0].ID, list[1].ID})
	requireEqual(t, a, list[0])
	// Re-queueing the old attempt would make two live attempts.
	a.State = store.AttemptQueued
	require.ErrorIs(t, s.AttemptUpdate(ctx, a), store.ErrAlreadyExists)
	require.ErrorIs(t, s.AttemptUpdate(ctx, &store.Attempt{ID: "att_missing", State: store.AttemptFailed}), store.ErrNotFound)
}

func testClaimEligibility(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	a := f.attempt(t, func(a *store.Attempt) {
		a.Labels = []string{"linux", "gpu"}
		a.NotBefore = t0.Add(time.Minute)
	})
	now := at(2 * time.Minute)
	for _, c := range []struct {
		name, tenant, pool string
		labels             []string
		now                *time.Time
	}{
		{"other tenant", "tnt_other", "default", []string{"linux", "gpu"}, now},
		{"other pool", f.tenant, "big", []string{"linux", "gpu"}, now},
		{"missing label", f.tenant, "default", []string{"linux"}, now},
		{"no labels", f.tenant, "default", nil, now},
		{"before not_before", f.tenant, "default", []string{"linux", "gpu"}, at(30 * time.Second)},
	} {
		_, err := claim(s, c.tenant, c.pool, c.labels, "r1", c.now)
		require.ErrorIs(t, err, store.ErrNotFound, c.name)
	}
	got, err := claim(s, f.tenant, "default", []string{"arm", "gpu", "linux"}, "r1", now)
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	_, err = claim(s, f.tenant, "default", []string{"arm", "gpu", "linux"}, "r2", now)
	require.ErrorIs(t, err, store.ErrNotFound, "a leased attempt is not claimable again")

	// No labels required: any runner of the pool qualifies.
	b := f.attempt(t, nil)
	got, err = claim(s, f.tenant, "default", nil, "r3", now)
	require.NoError(t, err)
	require.Equal(t, b.ID, got.ID)
}

func testClaimOrdering(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	a1 := f.attempt(t, func(a *store.Attempt) { a.NotBefore = t0.Add(-3 * time.Minute) })
	a2 := f.attempt(t, func(a *store.Attempt) { a.NotBefore = t0.Add(-time.Minute) })
	a3 := f.attempt(t, func(a *store.Attempt) { a.NotBefore = t0.Add(-2 * time.Minute) })
	// Same not_before: ID decides.
	a4 := f.attempt(t, func(a *store.Attempt) { a.NotBefore = t0.Add(-time.Minute) })
	var got []string
	for range 4 {
		a, err := claim(s, f.tenant, "default", nil, "r", at(0))
		require.NoError(t, err)
		got = append(got, a.ID)
	}
	require.Equal(t, []string{a1.ID, a3.ID, a2.ID, a4.ID}, got)
	_, err := claim(s, f.tenant, "default", nil, "r", at(0))
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testClaimLeaseMath(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	now := at(0)
	got, err := claim(s, f.tenant, "default", nil, "r1", now)
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	require.Equal(t, store.AttemptLeased, got.State)
	require.Equal(t, "r1", got.RunnerID)
	require.Equal(t, "digest-r1", got.LeaseDigest)
	require.Equal(t, "req-r1", got.ClaimRequestID)
	require.True(t, got.ClaimedAt.Equal(t0))
	require.True(t, got.HeartbeatAt.Equal(t0))
	require.True(t, got.Deadline.Equal(t0.Add(time.Hour)), "deadline %v", got.Deadline)
	require.True(t, got.LeaseExpiresAt.Equal(t0.Add(30*time.Second)), "expiry %v", got.LeaseExpiresAt)
	stored, err := s.AttemptGetByID(ctx, a.ID, false)
	require.NoError(t, err)
	requireEqual(t, got, stored)

	byReq, err := s.AttemptGetByClaimRequest(ctx, "r1", "req-r1")
	require.NoError(t, err)
	require.Equal(t, a.ID, byReq.ID)
	_, err = s.AttemptGetByClaimRequest(ctx, "r2", "req-r1")
	require.ErrorIs(t, err, store.ErrNotFound)
	leased, err := s.AttemptListLeasedByRunner(ctx, "r1")
	require.NoError(t, err)
	require.Len(t, leased, 1)
	none, err := s.AttemptListLeasedByRunner(ctx, "r2")
	require.NoError(t, err)
	require.Empty(t, none)

	// A timeout shorter than the TTL caps the first lease at the deadline.
	f.attempt(t, func(a *store.Attempt) { a.Timeout = 10 * time.Second })
	short, err := claim(s, f.tenant, "default", nil, "r2", at(time.Minute))
	require.NoError(t, err)
	require.True(t, short.Deadline.Equal(t0.Add(time.Minute+10*time.Second)))
	require.True(t, short.LeaseExpiresAt.Equal(*short.Deadline))

	// Claim with the database clock.
	f.attempt(t, nil)
	live, err := claim(s, f.tenant, "default", nil, "r3", nil)
	require.NoError(t, err)
	require.WithinDuration(t, clock.Real{}.Now(), *live.ClaimedAt, time.Minute)
	require.Equal(t, 30*time.Second, live.LeaseExpiresAt.Sub(*live.ClaimedAt))
}

func testRenew(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a := f.attempt(t, func(a *store.Attempt) { a.Timeout = 50 * time.Second })
	_, err := claim(s, f.tenant, "default", nil, "r1", at(0))
	require.NoError(t, err)
	renew := func(digest string, now time.Duration) (*store.Attempt, error) {
		return s.AttemptRenew(ctx, &store.AttemptRenewParams{ID: a.ID, LeaseDigest: digest, Now: at(now)})
	}
	_, err = renew("wrong", 10*time.Second)
	require.ErrorIs(t, err, store.ErrNotFound)
	got, err := renew("digest-r1", 10*time.Second)
	require.NoError(t, err)
	require.True(t, got.LeaseExpiresAt.Equal(t0.Add(40*time.Second)), "expiry %v", got.LeaseExpiresAt)
	require.True(t, got.HeartbeatAt.Equal(t0.Add(10*time.Second)))
	// Never past the deadline (t0+50s).
	got, err = renew("digest-r1", 30*time.Second)
	require.NoError(t, err)
	require.True(t, got.LeaseExpiresAt.Equal(t0.Add(50*time.Second)), "expiry %v", got.LeaseExpiresAt)
	// At or after expiry, the lease is gone.
	_, err = renew("digest-r1", 50*time.Second)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.AttemptRenew(ctx, &store.AttemptRenewParams{ID: "att_missing", LeaseDigest: "digest-r1", Now: at(0)})
	require.ErrorIs(t, err, store.ErrNotFound)

	// An attempt that is no longer leased cannot be renewed.
	b := f.attempt(t, nil)
	c, err := claim(s, f.tenant, "default", nil, "r2", at(0))
	require.NoError(t, err)
	require.Equal(t, b.ID, c.ID)
	c.State = store.AttemptSucceeded
	c.EndedAt = at(time.Second)
	require.NoError(t, s.AttemptUpdate(ctx, c))
	_, err = s.AttemptRenew(ctx, &store.AttemptRenewParams{ID: b.ID, LeaseDigest: "digest-r2", Now: at(2 * time.Second)})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testListExpired(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a := f.attempt(t, func(a *store.Attempt) { a.LeaseTTL = 20 * time.Second })
	b := f.attempt(t, func(a *store.Attempt) { a.LeaseTTL = 10 * time.Second })
	c := f.attempt(t, func(a *store.Attempt) { a.LeaseTTL = time.Hour })
	f.attempt(t, nil) // queued, never listed
	for range 3 {
		_, err := claim(s, f.tenant, "default", nil, "r", at(0))
		require.NoError(t, err)
	}
	list := func(now time.Duration, limit int) []string {
		t.Helper()
		as, err := s.AttemptListExpired(ctx, &store.AttemptListExpiredParams{Now: at(now), Limit: limit})
		require.NoError(t, err)
		var out []string
		for _, a := range as {
			out = append(out, a.ID)
		}
		return out
	}
	require.Empty(t, list(5*time.Second, 10))
	require.Equal(t, []string{b.ID}, list(10*time.Second, 10), "expiry exactly now counts")
	require.Equal(t, []string{b.ID, a.ID}, list(time.Minute, 10))
	require.Equal(t, []string{b.ID}, list(time.Minute, 1))
	require.Equal(t, []string{b.ID, a.ID, c.ID}, list(2*time.Hour, 10))
	// Ended attempts are not listed.
	got, err := s.AttemptGetByID(ctx, b.ID, false)
	require.NoError(t, err)
	got.State = store.AttemptExpired
	require.NoError(t, s.AttemptUpdate(ctx, got))
	require.Equal(t, []string{a.ID}, list(time.Minute, 10))
}

func testRunners(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	r := &store.Runner{ID: "rnr_1", Tenant: f.tenant, Pool: "default", Name: "w1", Labels: []string{"linux"},
		PublicKey: "pk", KeyFingerprint: "fp", Status: store.RunnerActive, SelfHosted: true,
		AllowedRepos: []string{"org/a"}, Version: "1.0", CreatedAt: t0}
	require.NoError(t, s.RunnerCreate(ctx, r))
	require.ErrorIs(t, s.RunnerCreate(ctx, r), store.ErrAlreadyExists)
	got, err := s.RunnerGetByID(ctx, r.ID, false)
	require.NoError(t, err)
	requireEqual(t, r, got)
	_, err = s.RunnerGetByID(ctx, "rnr_missing", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	r2 := &store.Runner{ID: "rnr_2", Tenant: f.tenant, Pool: "default", Name: "w2", Status: store.RunnerActive}
	require.NoError(t, s.RunnerCreate(ctx, r2))
	require.NoError(t, s.RunnerCreate(ctx, &store.Runner{ID: "rnr_3", Tenant: "tnt_other", Status: store.RunnerActive}))
	list, err := s.RunnerList(ctx, f.tenant)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []string{"rnr_1", "rnr_2"}, []string{list[0].ID, list[1].ID})

	require.NoError(t, s.RunnerTouch(ctx, r.ID, at(time.Minute)))
	require.ErrorIs(t, s.RunnerTouch(ctx, "rnr_missing", nil), store.ErrNotFound)
	require.Equal(t, store.ExecutorProcess, got.Executor, "a runner that names no executor runs the process executor")
	require.Zero(t, got.Capabilities)
	r.Status, r.PublicKey, r.KeyFingerprint, r.Labels = store.RunnerDisabled, "pk2", "fp2", []string{"arm"}
	r.Executor, r.Capabilities = "container", store.CapImages|store.CapIsolated
	require.NoError(t, s.RunnerUpdate(ctx, r))
	r.LastSeenAt = at(time.Minute)
	got, err = s.RunnerGetByID(ctx, r.ID, false)
	require.NoError(t, err)
	requireEqual(t, r, got)
	require.ErrorIs(t, s.RunnerUpdate(ctx, &store.Runner{ID: "rnr_missing"}), store.ErrNotFound)
}

func testRegTokens(t *testing.T, s store.Store) {
	ctx := bg()
	tok := &store.RegToken{Digest: "rd1", Tenant: "tnt_1", Pool: "default", Labels: []string{"linux"},
		AllowedRepos: []string{"org/a"}, SelfHosted: true, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
	require.NoError(t, s.RegTokenCreate(ctx, tok))
	require.ErrorIs(t, s.RegTokenCreate(ctx, tok), store.ErrAlreadyExists)
	used, err := s.RegTokenUse(ctx, "rd1", at(time.Minute))
	require.NoError(t, err)
	tok.UsedAt = at(time.Minute)
	requireEqual(t, tok, used)
	_, err = s.RegTokenUse(ctx, "rd1", at(2*time.Minute))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.RegTokenUse(ctx, "missing", at(0))
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, s.RegTokenCreate(ctx, &store.RegToken{Digest: "rd2", Tenant: "tnt_1", ExpiresAt: t0}))
	_, err = s.RegTokenUse(ctx, "rd2", at(0))
	require.ErrorIs(t, err, store.ErrNotFound, "expired at exactly now")
}

func testRegTokenConcurrent(t *testing.T, s store.Store) {
	ctx := bg()
	require.NoError(t, s.RegTokenCreate(ctx, &store.RegToken{Digest: "race", Tenant: "tnt_1", ExpiresAt: t0.Add(time.Hour)}))
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		wins   int
		errs   []error
		starts = make(chan struct{})
	)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-starts
			_, err := s.RegTokenUse(ctx, "race", at(0))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, store.ErrNotFound):
				errs = append(errs, err)
			}
		}()
	}
	close(starts)
	wg.Wait()
	require.Empty(t, errs)
	require.Equal(t, 1, wins)
}

func testNonces(t *testing.T, s store.Store) {
	ctx := bg()
	require.NoError(t, s.NonceInsert(ctx, "r1", "n1", t0))
	require.ErrorIs(t, s.NonceInsert(ctx, "r1", "n1", t0.Add(time.Hour)), store.ErrAlreadyExists)
	require.NoError(t, s.NonceInsert(ctx, "r2", "n1", t0.Add(time.Minute)))
	require.NoError(t, s.NonceInsert(ctx, "r1", "n2", t0.Add(time.Hour)))
	// Inside a transaction, a duplicate must not poison the transaction.
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.NonceInsert(ctx, "r1", "n1", t0); !errors.Is(err, store.ErrAlreadyExists) {
			return fmt.Errorf("want ErrAlreadyExists, got %v", err)
		}
		return tx.NonceInsert(ctx, "r1", "n3", t0.Add(time.Hour))
	}))
	n, err := s.NoncePurge(ctx, at(0))
	require.NoError(t, err)
	require.Equal(t, 0, n, "a nonce expiring exactly now is kept")
	n, err = s.NoncePurge(ctx, at(2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, s.NonceInsert(ctx, "r1", "n1", t0.Add(time.Hour)), "purged nonces can be recorded again")
	require.ErrorIs(t, s.NonceInsert(ctx, "r1", "n2", t0), store.ErrAlreadyExists)
}

func testLogs(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	b := f.attempt(t, nil)
	lines := func(texts ...string) []store.LogLine {
		var out []store.LogLine
		for i, x := range texts {
			out = append(out, store.LogLine{At: t0.Add(time.Duration(i) * time.Millisecond), Stream: "stdout", Text: x})
		}
		return out
	}
	appendChunk := func(att *store.Attempt, seq int64, texts ...string) bool {
		t.Helper()
		ok, err := s.LogAppend(ctx, &store.LogAppendParams{RunID: att.RunID, AttemptID: att.ID, Seq: seq, Lines: lines(texts...)})
		require.NoError(t, err)
		return ok
	}
	require.True(t, appendChunk(a, 1, "a", "b", "c"))
	require.True(t, appendChunk(b, 1, "other run"))
	require.False(t, appendChunk(a, 1, "a", "b", "c"), "a stored chunk is ignored")
	require.False(t, appendChunk(a, 1, "x"), "even with different content")
	require.True(t, appendChunk(a, 3, "e"))
	require.True(t, appendChunk(a, 2, "d", "stderr line"))
	// Inside a transaction too.
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		ok, err := tx.LogAppend(ctx, &store.LogAppendParams{RunID: a.RunID, AttemptID: a.ID, Seq: 3, Lines: lines("e")})
		if err != nil || ok {
			return fmt.Errorf("duplicate in tx: ok=%v err=%v", ok, err)
		}
		return nil
	}))

	all, err := s.LogList(ctx, &store.LogListParams{RunID: a.RunID, Limit: 100})
	require.NoError(t, err)
	var texts []string
	for i, l := range all {
		texts = append(texts, l.Text)
		require.Equal(t, a.RunID, l.RunID)
		require.Equal(t, a.ID, l.AttemptID)
		if i > 0 {
			require.Greater(t, l.ID, all[i-1].ID, "IDs increase in insertion order")
		}
	}
	require.Equal(t, []string{"a", "b", "c", "e", "d", "stderr line"}, texts)
	require.Equal(t, int64(2), all[4].Seq)
	require.Equal(t, 0, all[4].Idx)
	require.Equal(t, 1, all[5].Idx)
	require.True(t, all[1].At.Equal(t0.Add(time.Millisecond)))
	require.Equal(t, "stdout", all[0].Stream)

	page, err := s.LogList(ctx, &store.LogListParams{RunID: a.RunID, After: all[1].ID, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, all[2].ID, page[0].ID)
	require.Equal(t, all[3].ID, page[1].ID)
	rest, err := s.LogList(ctx, &store.LogListParams{RunID: a.RunID, After: all[5].ID, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, rest)
	other, err := s.LogList(ctx, &store.LogListParams{RunID: b.RunID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, other, 1)
}

func testAudit(t *testing.T, s store.Store) {
	ctx := bg()
	e1 := &store.AuditEvent{Tenant: "t1", At: t0, Actor: "alice", Action: "run.create", Subject: "run_1",
		Details: json.RawMessage(`{"job":"migrate"}`)}
	require.NoError(t, s.AuditAppend(ctx, e1))
	require.NotZero(t, e1.Seq)
	e2 := &store.AuditEvent{Tenant: "t1", Actor: "bob", Action: "run.approve", Subject: "run_2"}
	require.NoError(t, s.AuditAppend(ctx, e2))
	require.Greater(t, e2.Seq, e1.Seq)
	require.WithinDuration(t, clock.Real{}.Now(), e2.At, time.Minute, "zero At takes the database clock")
	e3 := &store.AuditEvent{Tenant: "t2", At: t0, Actor: "x", Action: "a", Subject: "run_1"}
	require.NoError(t, s.AuditAppend(ctx, e3))
	e4 := &store.AuditEvent{Tenant: "t1", At: t0, Actor: "x", Action: "run.cancel", Subject: "run_1"}
	require.NoError(t, s.AuditAppend(ctx, e4))

	all, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", Limit: 10})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{e1, e2, e4}, all)
	after, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", After: e1.Seq, Limit: 1})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{e2}, after)
	byRun, err := s.AuditList(ctx, &store.AuditListParams{Tenant: "t1", RunID: "run_1", Limit: 10})
	require.NoError(t, err)
	requireEqual(t, []*store.AuditEvent{e1, e4}, byRun)
}

func testNow(t *testing.T, s store.Store) {
	ctx := bg()
	got, err := s.Now(ctx, at(0))
	require.NoError(t, err)
	require.True(t, got.Equal(t0))
	db, err := s.Now(ctx, nil)
	require.NoError(t, err)
	require.WithinDuration(t, clock.Real{}.Now(), db, 5*time.Second)
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		n, err := tx.Now(ctx, nil)
		if err != nil {
			return err
		}
		if d := time.Since(n); d > 5*time.Second || d < -5*time.Second {
			return fmt.Errorf("tx clock off by %v", d)
		}
		return nil
	}))
}

func testInTxRollback(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	boom := errors.New("boom")
	runID := id.New(id.Run, t0)
	err := s.InTx(ctx, func(tx store.Tx) error {
		r := &store.Run{ID: runID, Tenant: f.tenant, Job: "j", Actor: "a", State: store.RunQueued}
		if err := tx.RunCreate(ctx, r); err != nil {
			return err
		}
		if err := tx.AttemptCreate(ctx, &store.Attempt{ID: "att_rb", RunID: runID, Tenant: f.tenant, Number: 1,
			Pool: "default", NotBefore: t0}); err != nil {
			return err
		}
		if err := tx.AuditAppend(ctx, &store.AuditEvent{Tenant: f.tenant, Action: "x", Subject: runID}); err != nil {
			return err
		}
		if _, err := tx.RunGetByID(ctx, runID, false); err != nil {
			return fmt.Errorf("own write not visible: %w", err)
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	_, err = s.RunGetByID(ctx, runID, false)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.AttemptGetByID(ctx, "att_rb", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	events, err := s.AuditList(ctx, &store.AuditListParams{Tenant: f.tenant, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, events)

	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		return tx.RunCreate(ctx, &store.Run{ID: runID, Tenant: f.tenant, Job: "j", Actor: "a", State: store.RunQueued})
	}))
	_, err = s.RunGetByID(ctx, runID, false)
	require.NoError(t, err)
}

// testForUpdate: concurrent read-modify-write transactions that lock with
// forUpdate lose no update.
func testForUpdate(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	a := f.attempt(t, nil)
	require.NoError(t, s.RunnerCreate(ctx, &store.Runner{ID: "rnr_fu", Tenant: f.tenant, Status: store.RunnerActive}))
	const n = 10
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.InTx(ctx, func(tx store.Tx) error {
				r, err := tx.RunGetByID(ctx, a.RunID, true)
				if err != nil {
					return err
				}
				att, err := tx.AttemptGetByID(ctx, a.ID, true)
				if err != nil {
					return err
				}
				rn, err := tx.RunnerGetByID(ctx, "rnr_fu", true)
				if err != nil {
					return err
				}
				r.CountedAttempts++
				if err := tx.RunUpdate(ctx, r); err != nil {
					return err
				}
				att.ClaimRequestID += "x"
				if err := tx.AttemptUpdate(ctx, att); err != nil {
					return err
				}
				rn.PublicKey += "k"
				return tx.RunnerUpdate(ctx, rn)
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	r, err := s.RunGetByID(ctx, a.RunID, false)
	require.NoError(t, err)
	require.Equal(t, n, r.CountedAttempts)
	att, err := s.AttemptGetByID(ctx, a.ID, false)
	require.NoError(t, err)
	require.Len(t, att.ClaimRequestID, n)
	rn, err := s.RunnerGetByID(ctx, "rnr_fu", false)
	require.NoError(t, err)
	require.Len(t, rn.PublicKey, n)
}

func closed(ch <-chan struct{}, wait time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(wait):
		return false
	}
}

// testWake: WakeClaimers and WakeWatchers wake this store's waiters after
// a commit, never before it nor after a rollback, and at once outside a
// transaction.
func testWake(t *testing.T, s store.Store) {
	for _, w := range []struct {
		name string
		wake func(store.Queries, context.Context) error
	}{
		{"claimers", store.Queries.WakeClaimers},
		{"watchers", store.Queries.WakeWatchers},
	} {
		t.Run(w.name, func(t *testing.T) {
			ctx := bg()
			ch := s.Wake()
			err := s.InTx(ctx, func(tx store.Tx) error {
				if err := w.wake(tx, ctx); err != nil {
					return err
				}
				return errors.New("rollback")
			})
			require.Error(t, err)
			require.False(t, closed(ch, 300*time.Millisecond), "woken by a rolled-back transaction")

			var closedBeforeCommit bool
			require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
				if err := w.wake(tx, ctx); err != nil {
					return err
				}
				closedBeforeCommit = closed(ch, 50*time.Millisecond)
				return nil
			}))
			require.False(t, closedBeforeCommit, "woken before commit")
			require.True(t, closed(ch, 5*time.Second), "not woken after commit")

			ch = s.Wake()
			require.NoError(t, w.wake(s, ctx))
			require.True(t, closed(ch, 5*time.Second), "not woken outside a transaction")
			require.False(t, closed(s.Wake(), 0), "a fresh channel is open")
		})
	}
}

// testDoubleAssignment: every attempt is claimed exactly once by concurrent
// claimers (RELIABILITY C1 in small).
func testDoubleAssignment(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	const total, workers = 2000, 16
	seedStart := clock.Real{}.Now()
	want := make(map[string]bool, total)
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
		for i := range total {
			ts := t0.Add(time.Duration(i) * time.Millisecond)
			r := &store.Run{ID: id.New(id.Run, ts), Tenant: f.tenant, Job: "j", Actor: "a", State: store.RunQueued, CreatedAt: t0}
			if err := tx.RunCreate(ctx, r); err != nil {
				return err
			}
			a := &store.Attempt{ID: id.New(id.Attempt, ts), RunID: r.ID, Tenant: f.tenant, Number: 1,
				State: store.AttemptQueued, Pool: "default", LeaseTTL: time.Minute, Timeout: time.Hour,
				NotBefore: ts.Add(-time.Hour), CreatedAt: t0}
			if err := tx.AttemptCreate(ctx, a); err != nil {
				return err
			}
			want[a.ID] = true
		}
		return nil
	}))

	t.Logf("seeded in %v", time.Since(seedStart))
	type claimed struct{ attempt, runner string }
	results := make([][]claimed, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runner := fmt.Sprintf("rnr_%02d", w)
			for {
				var got *store.Attempt
				err := s.InTx(ctx, func(tx store.Tx) error {
					var err error
					got, err = claim(tx, f.tenant, "default", nil, runner, at(0))
					return err
				})
				if errors.Is(err, store.ErrNotFound) {
					return
				}
				if err != nil {
					errs[w] = err
					return
				}
				results[w] = append(results[w], claimed{got.ID, runner})
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	seen := make(map[string]string, total)
	for _, rs := range results {
		for _, c := range rs {
			if prev, dup := seen[c.attempt]; dup {
				t.Fatalf("attempt %s claimed by %s and %s", c.attempt, prev, c.runner)
			}
			seen[c.attempt] = c.runner
		}
	}
	require.Len(t, seen, total)
	for id, runner := range seen {
		require.True(t, want[id], "claimed unknown attempt %s", id)
		a, err := s.AttemptGetByID(ctx, id, false)
		require.NoError(t, err)
		require.Equal(t, store.AttemptLeased, a.State)
		require.Equal(t, runner, a.RunnerID)
		require.Equal(t, "digest-"+runner, a.LeaseDigest)
	}
}
