package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/s3test"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func TestMain(m *testing.M) {
	code := s3test.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) Swept(kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[kind] += n
}

func (c *counter) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// world is a store with a tenant, an artifact store and helpers to make
// ended runs with logs and artifacts.
type world struct {
	t      *testing.T
	s      store.Store
	objs   artifact.Storage
	clk    *clock.Fake
	tenant string
	n      int
}

func sys() context.Context { return store.WithSystem(context.Background(), "test") }

func newWorld(t *testing.T, s store.Store, objs artifact.Storage) *world {
	tn, err := s.TenantEnsure(sys(), "acme", &t0)
	require.NoError(t, err)
	return &world{t: t, s: s, objs: objs, clk: clock.NewFake(t0), tenant: tn.ID}
}

// run makes a run that ended at end (nil: still running), whose spec is
// spec, with lines log lines and the named artifacts.
func (w *world) run(end *time.Time, spec string, lines int, artifacts ...string) (*store.Run, *store.Attempt) {
	t := w.t
	ctx := sys()
	w.n++
	r := &store.Run{ID: id.New(id.Run, t0.Add(time.Duration(w.n)*time.Millisecond)), Tenant: w.tenant, Job: "report",
		Channel: "prod", Ref: "main", Commit: "abc", Params: json.RawMessage(`{}`), Actor: "alice",
		Source: json.RawMessage(`{"kind":"api"}`), State: store.RunRunning, MaxAttempts: 1, CreatedAt: t0, UpdatedAt: t0}
	if end != nil {
		r.State, r.FinishedAt = store.RunSucceeded, end
	}
	if spec != "" {
		r.Spec = json.RawMessage(spec)
	}
	require.NoError(t, w.s.RunCreate(ctx, r))
	a := &store.Attempt{ID: id.New(id.Attempt, t0.Add(time.Duration(w.n)*time.Millisecond)), RunID: r.ID, Tenant: w.tenant,
		Number: 1, State: store.AttemptSucceeded, Pool: "default", LeaseTTL: 30 * time.Second, Timeout: time.Hour, CreatedAt: t0}
	require.NoError(t, w.s.AttemptCreate(ctx, a))
	for seq := 0; seq < lines; seq += 10 {
		var ls []store.LogLine
		for i := seq; i < min(seq+10, lines); i++ {
			ls = append(ls, store.LogLine{At: t0, Stream: "stdout", Text: "line"})
		}
		_, err := w.s.LogAppend(ctx, &store.LogAppendParams{RunID: r.ID, AttemptID: a.ID, Seq: int64(seq), Lines: ls})
		require.NoError(t, err)
	}
	for _, name := range artifacts {
		key := w.tenant + "/" + r.ID + "/" + a.ID + "/" + name
		st, err := w.objs.Stage(ctx, key, strings.NewReader("bytes of "+name), 1<<20)
		require.NoError(t, err)
		require.NoError(t, st.Publish(ctx))
		art := &store.Artifact{ID: id.New("art", t0), Tenant: w.tenant, RunID: r.ID, AttemptID: a.ID, Name: name, Role: "r",
			MaxBytes: 1 << 20, CapabilityDigest: "cap-" + r.ID + name, LeaseDigest: "ld", StorageKey: key,
			State: store.ArtifactUploading, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
		require.NoError(t, w.s.InTx(ctx, func(tx store.Tx) error {
			if err := tx.ArtifactCreate(ctx, art); err != nil {
				return err
			}
			art.Size, art.SHA256, art.StoredAt = st.Size(), st.SHA256(), &t0
			return tx.ArtifactMarkStored(ctx, art)
		}))
	}
	return r, a
}

func (w *world) lines(runID string) int {
	ls, err := w.s.LogList(sys(), &store.LogListParams{RunID: runID, Limit: 10000})
	require.NoError(w.t, err)
	return len(ls)
}

func (w *world) artifacts(runID string) []*store.Artifact {
	as, err := w.s.ArtifactListByRun(sys(), runID)
	require.NoError(w.t, err)
	return as
}

func (w *world) sweeper(holder string, obs Observer) *Sweeper {
	return New(Config{Store: w.s, Objects: w.objs, Clock: w.clk, Metrics: obs, Holder: holder,
		DefaultLogs: 30 * day, Batch: 2, LogBatch: 7})
}

func (w *world) events(action string) []*store.AuditEvent {
	evs, err := w.s.AuditList(sys(), &store.AuditListParams{Tenant: w.tenant, Limit: 1000})
	require.NoError(w.t, err)
	var out []*store.AuditEvent
	for _, e := range evs {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

func fsStore(t *testing.T) artifact.Storage {
	fs, err := artifact.OpenFS(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { fs.Close() })
	return fs
}

func TestSweepDeletesWhatIsDueAndKeepsTheRecords(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s store.Store) { testSweep(t, s, fsStore(t)) })
}

// The same with artifacts in a real S3 server (SeaweedFS).
func TestSweepDeletesWhatIsDueOnS3(t *testing.T) {
	srv := s3test.Optional(t)
	if srv == nil {
		t.Skip("no S3 server")
	}
	objs, err := artifact.OpenS3(context.Background(), artifact.S3Config{Bucket: srv.Bucket(t), Endpoint: srv.Endpoint,
		Region: s3test.Region, Credentials: artifact.StaticCredentials(srv.AccessKey, srv.SecretKey, "")})
	require.NoError(t, err)
	t.Cleanup(func() { objs.Close() })
	testSweep(t, testdb.Postgres(t), objs)
}

func testSweep(t *testing.T, s store.Store, objs artifact.Storage) {
	{
		w := newWorld(t, s, objs)
		ctx := sys()
		obs := &counter{}
		end := t0.Add(time.Hour)
		// Job periods: logs 1 day, artifacts 2 days; the server's default
		// keeps logs 30 days and artifacts forever.
		short, shortAtt := w.run(&end, `{"name":"report","retention":{"logs":"24h0m0s","artifacts":"48h0m0s"}}`, 23, "a.txt", "b.txt", "c.txt")
		dflt, _ := w.run(&end, `{"name":"report"}`, 5, "keep.txt")
		live, _ := w.run(nil, "", 4, "live.txt")
		sw := w.sweeper("a", obs)

		rep, err := sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, Report{Stamped: 2}, rep, "nothing is due yet")
		plan, err := sw.Plan(ctx, "", 10)
		require.NoError(t, err)
		require.Empty(t, plan)

		w.clk.Set(end.Add(day))
		plan, err = sw.Plan(ctx, "", 10)
		require.NoError(t, err)
		require.Equal(t, []Planned{{Kind: "logs", Tenant: w.tenant, RunID: short.ID, Job: "report", DueAt: end.Add(day)}}, plan)
		require.Equal(t, 23, w.lines(short.ID), "a plan deletes nothing")

		rep, err = sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, Report{LogRuns: 1, LogLines: 23}, rep)
		require.Zero(t, w.lines(short.ID))
		require.Len(t, w.artifacts(short.ID), 3, "artifacts are kept longer")
		evs := w.events("run.logs_pruned")
		require.Len(t, evs, 1)
		require.Equal(t, short.ID, evs[0].Subject)
		require.Equal(t, Actor, evs[0].Actor)
		require.JSONEq(t, `{"job":"report","lines":23,"due_at":"`+end.Add(day).Format(time.RFC3339)+`"}`, string(evs[0].Details))

		w.clk.Set(end.Add(2 * day))
		rep, err = sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, Report{ArtifactRuns: 1, Artifacts: 3}, rep)
		require.Empty(t, w.artifacts(short.ID))
		for _, name := range []string{"a.txt", "b.txt", "c.txt"} {
			_, err := w.objs.Open(ctx, w.tenant+"/"+short.ID+"/"+shortAtt.ID+"/"+name)
			require.ErrorIs(t, err, artifact.ErrNotFound, "the object is gone too")
		}
		evs = w.events("run.artifacts_pruned")
		require.Len(t, evs, 2, "one event per batch of two")
		var names []string
		for i, e := range evs {
			var d artifactsPrunedDetails
			require.NoError(t, json.Unmarshal(e.Details, &d))
			require.Len(t, d.Artifacts, 2-i)
			for _, a := range d.Artifacts {
				names = append(names, a.Name)
				require.Len(t, a.SHA256, 64)
				require.Equal(t, shortAtt.ID, a.Attempt)
			}
		}
		require.ElementsMatch(t, []string{"a.txt", "b.txt", "c.txt"}, names, "the events name every artifact deleted")

		w.clk.Set(end.Add(31 * day))
		rep, err = sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, Report{LogRuns: 1, LogLines: 5}, rep, "the server's default applies to the job without a period")
		require.Len(t, w.artifacts(dflt.ID), 1, "no default for artifacts: kept")
		require.Equal(t, 4, w.lines(live.ID), "a live run is never touched")
		require.Len(t, w.artifacts(live.ID), 1)

		// The run records stay and the audit chain verifies.
		for _, r := range []*store.Run{short, dflt, live} {
			got, err := s.RunGetByID(ctx, r.ID, false)
			require.NoError(t, err)
			require.Equal(t, r.State, got.State)
		}
		_, err = audit.NewSealer(s, nil).SealAll(ctx)
		require.NoError(t, err)
		vr, err := audit.Verify(ctx, s, nil)
		require.NoError(t, err)
		require.True(t, vr.OK, "%+v", vr)
		require.EqualValues(t, 4, vr.Sealed, "the four deletion events")
		require.Equal(t, 28, obs.get("log_line"))
		require.Equal(t, 3, obs.get("artifact"))
		require.Equal(t, 2, obs.get("run_logs"))

		rep, err = sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, Report{}, rep, "a second sweep finds nothing")
	}
}

func TestOneReplicaSweepsAtATime(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s store.Store) {
		w := newWorld(t, s, fsStore(t))
		ctx := sys()
		end := t0.Add(time.Hour)
		r, _ := w.run(&end, "", 30)
		a, b := w.sweeper("a", nil), w.sweeper("b", nil)
		rep, err := a.Sweep(ctx)
		require.NoError(t, err)
		require.False(t, rep.Skipped)
		rep, err = b.Sweep(ctx)
		require.NoError(t, err)
		require.True(t, rep.Skipped, "a holds the lease")

		// a pauses past its lease; b takes over; a's next write is fenced.
		w.clk.Advance(DefaultLeaseTTL)
		w.clk.Set(end.Add(30 * day))
		fenced := &writer{s: a, token: 1}
		err = fenced.inTx(ctx, func(tx store.Tx) error {
			_, err := tx.LogPrune(ctx, r.ID, 100)
			return err
		})
		require.ErrorIs(t, err, ErrLeaseLost, "an expired lease fences before b even asks")
		rep, err = b.Sweep(ctx)
		require.NoError(t, err)
		require.False(t, rep.Skipped)
		require.Equal(t, 30, rep.LogLines)
		err = fenced.inTx(ctx, func(tx store.Tx) error { return errors.New("must not run") })
		require.ErrorIs(t, err, ErrLeaseLost, "a's token is stale")
		rep, err = a.Sweep(ctx)
		require.NoError(t, err)
		require.True(t, rep.Skipped)
	})
}

func TestSweepCapabilities(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s store.Store) {
		objs := fsStore(t)
		w := newWorld(t, s, objs)
		ctx := sys()
		r, a := w.run(nil, "", 0)
		mk := func(name string, state store.ArtifactState, created time.Time, publish bool) *store.Artifact {
			key := w.tenant + "/" + r.ID + "/" + a.ID + "/" + name
			if publish {
				st, err := objs.Stage(ctx, key, strings.NewReader("x"), 10)
				require.NoError(t, err)
				require.NoError(t, st.Publish(ctx))
			}
			art := &store.Artifact{ID: id.New("art", created), Tenant: w.tenant, RunID: r.ID, AttemptID: a.ID, Name: name, Role: "r",
				MaxBytes: 10, CapabilityDigest: "cap-" + name, LeaseDigest: "ld", StorageKey: key, State: state,
				ExpiresAt: created.Add(10 * time.Minute), CreatedAt: created}
			require.NoError(t, s.InTx(ctx, func(tx store.Tx) error { return tx.ArtifactCreate(ctx, art) }))
			return art
		}
		mk("expired", store.ArtifactPending, t0, false)
		fresh := mk("fresh", store.ArtifactPending, t0.Add(time.Hour), false)
		// A publish whose commit was lost left its object and an uploading row.
		lost := mk("lost", store.ArtifactUploading, t0, true)
		inflight := mk("inflight", store.ArtifactUploading, t0.Add(time.Hour), true)
		for i, exp := range []time.Duration{time.Minute, 2 * time.Hour} {
			tk := &store.SourceTicket{Digest: "d" + string(rune('0'+i)), Tenant: w.tenant, RunID: r.ID, AttemptID: a.ID,
				LeaseDigest: "ld", Repo: "code", Commit: "c", ExpiresAt: t0.Add(exp), CreatedAt: t0}
			require.NoError(t, s.InTx(ctx, func(tx store.Tx) error { return tx.SourceTicketCreate(ctx, tk) }))
		}
		w.clk.Set(t0.Add(time.Hour + 5*time.Minute))
		sw := w.sweeper("a", nil)
		plan, err := sw.Plan(ctx, "", 10)
		require.NoError(t, err)
		require.Len(t, plan, 2)
		require.Equal(t, "expired", plan[0].Artifact.Name)
		require.Equal(t, "lost", plan[1].Artifact.Name)
		require.Equal(t, "uploading", plan[1].Artifact.State)
		plan, err = sw.Plan(ctx, "another-tenant", 10)
		require.NoError(t, err)
		require.Empty(t, plan, "a tenant's plan names only its own rows")
		plan, err = sw.Plan(ctx, w.tenant, 1)
		require.NoError(t, err)
		require.Len(t, plan, 1, "limit")

		rep, err := sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, rep.Capabilities)
		require.Equal(t, 1, rep.Tickets)
		_, err = objs.Open(ctx, lost.StorageKey)
		require.ErrorIs(t, err, artifact.ErrNotFound, "the lost publish's object is deleted")
		rc, err := objs.Open(ctx, inflight.StorageKey)
		require.NoError(t, err, "an upload in flight is left alone")
		_, _ = io.Copy(io.Discard, rc)
		rc.Close()
		_, err = s.ArtifactGetByID(ctx, fresh.ID)
		require.NoError(t, err)
		_, err = s.ArtifactGetByID(ctx, lost.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// Two replicas sweeping at once: one holds the lease, the other skips;
// every line goes once, and each run gets one event.
func TestConcurrentSweepsDeleteOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s store.Store) {
		w := newWorld(t, s, fsStore(t))
		ctx := sys()
		end := t0.Add(time.Hour)
		var runs []*store.Run
		for range 4 {
			r, _ := w.run(&end, "", 15)
			runs = append(runs, r)
		}
		w.clk.Set(end.Add(31 * day))
		var mu sync.Mutex
		total, worked := 0, 0
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sw := w.sweeper(string(rune('a'+i)), nil)
				for range 3 {
					rep, err := sw.Sweep(ctx)
					if errors.Is(err, store.ErrContention) {
						continue // SQLite's single writer under load; the next round retries
					}
					require.NoError(t, err)
					mu.Lock()
					total += rep.LogLines
					if !rep.Skipped {
						worked++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Equal(t, 60, total, "every line deleted exactly once")
		require.GreaterOrEqual(t, worked, 1)
		require.LessOrEqual(t, worked, 3, "only the one holder sweeps (at most its three rounds)")
		require.Len(t, w.events("run.logs_pruned"), 4)
		for _, r := range runs {
			require.Zero(t, w.lines(r.ID))
		}
	})
}

// replaying runs each transaction's function twice, the first time in a
// transaction it rolls back, as a store does when it retries a transaction
// after a serialization failure or a deadlock.
type replaying struct{ store.Store }

var errReplay = errors.New("rolled back to be run again")

func (s replaying) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	err := s.Store.InTx(ctx, func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errReplay
	})
	if !errors.Is(err, errReplay) {
		return err
	}
	return s.Store.InTx(ctx, fn)
}

// TestSweepCountsRetriedTransactionsOnce: a transaction the store runs
// again counts what it deleted once, in the report, the metrics and the
// audit event.
func TestSweepCountsRetriedTransactionsOnce(t *testing.T) {
	w := newWorld(t, testdb.SQLite(t), fsStore(t))
	end := t0.Add(time.Hour)
	r, _ := w.run(&end, `{"name":"report","retention":{"logs":"24h0m0s","artifacts":"48h0m0s"}}`, 23, "a.txt", "b.txt", "c.txt")
	w.s = replaying{w.s}
	obs := &counter{}
	sw := w.sweeper("a", obs)
	_, err := sw.Sweep(sys())
	require.NoError(t, err)

	w.clk.Set(end.Add(day))
	rep, err := sw.Sweep(sys())
	require.NoError(t, err)
	require.Equal(t, Report{LogRuns: 1, LogLines: 23}, rep)
	require.Equal(t, 23, obs.get("log_line"))
	evs := w.events("run.logs_pruned")
	require.Len(t, evs, 1)
	require.JSONEq(t, `{"job":"report","lines":23,"due_at":"`+end.Add(day).Format(time.RFC3339)+`"}`, string(evs[0].Details))

	w.clk.Set(end.Add(2 * day))
	rep, err = sw.Sweep(sys())
	require.NoError(t, err)
	require.Equal(t, Report{ArtifactRuns: 1, Artifacts: 3}, rep)
	require.Empty(t, w.artifacts(r.ID))
}
