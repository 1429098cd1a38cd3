package retention

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/logarchive"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/s3test"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// attempt adds a second attempt to run r with n lines "att-N i".
func (w *world) attempt(r *store.Run, number, n int) *store.Attempt {
	ctx := sys()
	a := &store.Attempt{ID: id.New(id.Attempt, t0.Add(time.Duration(w.n*10+number)*time.Millisecond)), RunID: r.ID, Tenant: w.tenant,
		Number: number, State: store.AttemptFailed, Pool: "default", LeaseTTL: 30 * time.Second, Timeout: time.Hour, CreatedAt: t0}
	require.NoError(w.t, w.s.AttemptCreate(ctx, a))
	for seq := 0; seq < n; seq += 4 {
		var ls []store.LogLine
		for i := seq; i < min(seq+4, n); i++ {
			ls = append(ls, store.LogLine{At: t0.Add(time.Duration(i) * time.Second), Stream: "stderr", Text: fmt.Sprintf("att-%d %d", number, i)})
		}
		_, err := w.s.LogAppend(ctx, &store.LogAppendParams{RunID: r.ID, AttemptID: a.ID, Seq: int64(seq), Lines: ls})
		require.NoError(w.t, err)
	}
	return a
}

// served pages through a run's lines as the logs API does.
func served(t *testing.T, rd *logarchive.Reader, r *store.Run, page int) []*store.LogLine {
	var out []*store.LogLine
	after := int64(0)
	for {
		ls, err := rd.Lines(sys(), r, after, page)
		require.NoError(t, err)
		if len(ls) == 0 {
			return out
		}
		out = append(out, ls...)
		after = ls[len(ls)-1].ID
	}
}

func (w *world) mover(holder string, obs Observer) *Sweeper {
	return New(Config{Store: w.s, Objects: w.objs, Clock: w.clk, Metrics: obs, Holder: holder,
		DefaultLogs: 30 * day, Batch: 2, LogBatch: 7, ArchiveLogsAfter: time.Hour})
}

func TestMoveLogs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s store.Store) { testMoveLogs(t, s, fsStore(t)) })
}

// The same with a real S3 server (SeaweedFS).
func TestMoveLogsOnS3(t *testing.T) {
	testMoveLogs(t, testdb.Postgres(t), s3Store(t))
}

func s3Store(t *testing.T) artifact.Storage {
	srv := s3test.Optional(t)
	if srv == nil {
		t.Skip("no S3 server")
	}
	objs, err := artifact.OpenS3(context.Background(), artifact.S3Config{Bucket: srv.Bucket(t), Endpoint: srv.Endpoint,
		Region: s3test.Region, Credentials: artifact.StaticCredentials(srv.AccessKey, srv.SecretKey, "")})
	require.NoError(t, err)
	t.Cleanup(func() { objs.Close() })
	return objs
}

// testMoveLogs: the logs of a run ended ArchiveLogsAfter ago move to the
// object store, one object per attempt, audited; the database keeps none
// of them and the reader serves the same lines, with the same cursors, in
// any page size; a live run's stay; retention deletes the objects too and
// the audit chain verifies.
func testMoveLogs(t *testing.T, s store.Store, objs artifact.Storage) {
	w := newWorld(t, s, objs)
	ctx := sys()
	obs := &counter{}
	end := t0.Add(time.Hour)
	r, a1 := w.run(&end, "", 23)
	a2 := w.attempt(r, 2, 17)
	live, _ := w.run(nil, "", 5)
	rd := &logarchive.Reader{Store: s, Objects: objs}
	before := served(t, rd, r, 1000)
	require.Len(t, before, 40)
	liveBefore := served(t, rd, live, 1000)
	sw := w.mover("a", obs)

	w.clk.Set(end.Add(30 * time.Minute))
	rep, err := sw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, Report{Stamped: 1}, rep, "not yet")

	w.clk.Set(end.Add(time.Hour))
	rep, err = sw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, Report{LogArchives: 2, LogLinesMoved: 40, LogRunsMoved: 1}, rep)
	require.Zero(t, w.lines(r.ID), "the database keeps none of a moved run's lines")
	require.Equal(t, 5, w.lines(live.ID), "a live run's stay")
	for _, page := range []int{1, 3, 7, 23, 1000} {
		require.Equal(t, before, served(t, rd, r, page), "page %d", page)
	}
	require.Equal(t, liveBefore, served(t, rd, live, 1000))
	for _, after := range []int64{before[0].ID, before[22].ID, before[23].ID, before[39].ID} {
		ls, err := rd.Lines(ctx, r, after, 1000)
		require.NoError(t, err)
		var want []*store.LogLine
		for _, l := range before {
			if l.ID > after {
				want = append(want, l)
			}
		}
		if len(want) == 0 {
			require.Empty(t, ls)
		} else {
			require.Equal(t, want, ls, "a cursor handed out before the move still works")
		}
	}
	archives, err := s.LogArchiveList(ctx, r.ID)
	require.NoError(t, err)
	require.Len(t, archives, 2)
	require.Equal(t, a1.ID, archives[0].AttemptID)
	require.Equal(t, a2.ID, archives[1].AttemptID)
	require.Equal(t, store.LogArchiveStored, archives[0].State)
	evs := w.events("run.logs_archived")
	require.Len(t, evs, 2)
	require.Equal(t, 2, obs.get("log_archive"))
	require.Equal(t, 40, obs.get("log_line_moved"))

	rep, err = sw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, Report{}, rep, "a second sweep finds nothing")

	// Retention deletes the objects with the rows, and says how many lines.
	w.clk.Set(end.Add(30 * day))
	rep, err = sw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.LogRuns)
	require.Equal(t, 40, rep.LogLines)
	for _, a := range archives {
		_, err := objs.Open(ctx, a.Key)
		require.ErrorIs(t, err, artifact.ErrNotFound)
	}
	archives, err = s.LogArchiveList(ctx, r.ID)
	require.NoError(t, err)
	require.Empty(t, archives)
	require.Empty(t, served(t, rd, r, 1000))
	pruned := w.events("run.logs_pruned")
	require.Len(t, pruned, 1)
	require.JSONEq(t, `{"job":"report","lines":40,"due_at":"`+end.Add(30*day).Format(time.RFC3339)+`"}`, string(pruned[0].Details))
	_, err = audit.NewSealer(s, nil).SealAll(ctx)
	require.NoError(t, err)
	vr, err := audit.Verify(ctx, s, nil)
	require.NoError(t, err)
	require.True(t, vr.OK, "%+v", vr)
}

// TestMoveInterrupted: a move interrupted after publishing (nothing
// committed) or after committing its row (lines in both places) serves
// every line once, and the next round finishes with the same object.
func TestMoveInterrupted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s store.Store) {
		objs := fsStore(t)
		w := newWorld(t, s, objs)
		ctx := sys()
		end := t0.Add(time.Hour)
		r, a := w.run(&end, "", 30)
		rd := &logarchive.Reader{Store: s, Objects: objs}
		before := served(t, rd, r, 1000)
		sw := w.mover("a", nil)
		w.clk.Set(end.Add(2 * time.Hour))

		// Killed between publishing and committing.
		src := func(ctx context.Context, after int64, n int) ([]*store.LogLine, error) {
			return s.LogListAttempt(ctx, r.ID, a.ID, after, n)
		}
		orphan, err := logarchive.Write(ctx, objs, w.tenant, r.ID, a.ID, src)
		require.NoError(t, err)
		require.Equal(t, before, served(t, rd, r, 7), "served from the database")

		// Killed after committing the row, before deleting every line:
		// one batch of 7 went.
		lease, err := s.SystemLeaseAcquire(ctx, LeaseName, "a", time.Hour, w.clk.NowOrNil())
		require.NoError(t, err)
		wr := &writer{s: sw, token: lease.Token}
		rs, err := s.RunsLogsUnarchived(ctx, w.clk.Now().Add(-time.Hour), w.clk.NowOrNil(), 10)
		require.NoError(t, err)
		require.Empty(t, rs, "not stamped yet")
		require.NoError(t, sw.stamp(ctx, wr, &Report{}))
		rs, err = s.RunsLogsUnarchived(ctx, w.clk.Now().Add(-time.Hour), w.clk.NowOrNil(), 10)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		arch, err := sw.archive(ctx, wr, rs[0], a.ID)
		require.NoError(t, err)
		require.Equal(t, orphan.Key, arch.Key, "the published object is used again")
		require.Equal(t, orphan.SHA256, arch.SHA256)
		again, err := sw.archive(ctx, wr, rs[0], a.ID)
		require.NoError(t, err, "recorded already: the row stands")
		require.Equal(t, arch.Key, again.Key)
		require.Equal(t, arch.Blocks, again.Blocks)
		require.NoError(t, s.InTx(ctx, func(tx store.Tx) error {
			n, err := tx.LogDeleteArchived(ctx, r.ID, a.ID, arch.LastID, 7)
			require.Equal(t, 7, n)
			return err
		}))
		require.Equal(t, 23, w.lines(r.ID))
		for _, page := range []int{1, 5, 1000} {
			require.Equal(t, before, served(t, rd, r, page), "each line once, page %d", page)
		}

		rep, err := sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, Report{LogRunsMoved: 1}, rep, "the next round finishes")
		require.Zero(t, w.lines(r.ID))
		require.Equal(t, before, served(t, rd, r, 1000))
		require.Len(t, w.events("run.logs_archived"), 1)
	})
}

// TestMovedLogsStoreDown: the object store down fails the move, keeps the
// lines in the database and served; once moved, reads of those logs
// answer protocol.ErrUnavailable (503) until it is back.
func TestMovedLogsStoreDown(t *testing.T) {
	s := testdb.SQLite(t)
	fs := fsStore(t)
	sw := &switchable{Storage: fs}
	w := newWorld(t, s, sw)
	ctx := sys()
	end := t0.Add(time.Hour)
	r, _ := w.run(&end, "", 12)
	rd := &logarchive.Reader{Store: s, Objects: sw}
	before := served(t, rd, r, 1000)
	mv := w.mover("a", nil)
	w.clk.Set(end.Add(2 * time.Hour))

	sw.down = true
	_, err := mv.Sweep(ctx)
	require.ErrorIs(t, err, artifact.ErrUnavailable)
	require.Equal(t, 12, w.lines(r.ID))
	require.Equal(t, before, served(t, rd, r, 1000))

	sw.down = false
	rep, err := mv.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.LogRunsMoved)
	sw.down = true
	_, err = rd.Lines(ctx, r, 0, 1000)
	require.ErrorIs(t, err, protocol.ErrUnavailable)
	sw.down = false
	require.Equal(t, before, served(t, rd, r, 1000))
}

// switchable is an object store that can be down.
type switchable struct {
	artifact.Storage
	down bool
}

func (s *switchable) Stage(ctx context.Context, key string, r io.Reader, max int64) (artifact.Staged, error) {
	if s.down {
		return nil, artifact.ErrUnavailable
	}
	return s.Storage.Stage(ctx, key, r, max)
}

func (s *switchable) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if s.down {
		return nil, artifact.ErrUnavailable
	}
	return s.Storage.OpenRange(ctx, key, off, n)
}

// TestSweepStagedUploads: an upload a crash left staged is kept while an
// upload of that age could still be in flight (the upload timeout and a
// margin), then dropped by the lease holder's sweep, and counted.
func TestSweepStagedUploads(t *testing.T) {
	dir := t.TempDir()
	fs, err := artifact.OpenFS(dir)
	require.NoError(t, err)
	t.Cleanup(func() { fs.Close() })
	w := newWorld(t, testdb.SQLite(t), fs)
	// Staged files carry the filesystem's time: start the fake clock there.
	w.clk.Set(time.Now())
	obs := &counter{}
	sw := New(Config{Store: w.s, Objects: fs, Clock: w.clk, Metrics: obs, Holder: "a", UploadTimeout: time.Minute})
	key, _ := artifact.Key("tnt_1", "run_1", "att_1", "crash.bin")
	_, err = fs.Stage(context.Background(), key, strings.NewReader("left by a crash"), 100)
	require.NoError(t, err)

	w.clk.Advance(5 * time.Minute) // less than timeout + margin
	rep, err := sw.Sweep(sys())
	require.NoError(t, err)
	require.Zero(t, rep.StagedUploads, "possibly still in flight")
	w.clk.Advance(2 * time.Minute)
	rep, err = New(Config{Store: w.s, Objects: fs, Clock: w.clk, Holder: "b", UploadTimeout: time.Minute}).Sweep(sys())
	require.NoError(t, err)
	require.True(t, rep.Skipped, "one replica at a time")
	rep, err = sw.Sweep(sys())
	require.NoError(t, err)
	require.Equal(t, 1, rep.StagedUploads)
	require.Equal(t, 1, obs.get("staged_upload"))
	entries, err := os.ReadDir(filepath.Join(dir, ".tmp"))
	require.NoError(t, err)
	require.Empty(t, entries)
}

// TestReadWhileMoving: a reader paging through a run's lines while the
// sweep moves them sees every line once, in order, at every point.
func TestReadWhileMoving(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s store.Store) {
		objs := fsStore(t)
		w := newWorld(t, s, objs)
		ctx := sys()
		end := t0.Add(time.Hour)
		r, _ := w.run(&end, "", 60)
		w.attempt(r, 2, 45)
		rd := &logarchive.Reader{Store: s, Objects: objs}
		before := served(t, rd, r, 1000)
		w.clk.Set(end.Add(2 * time.Hour))
		sw := New(Config{Store: s, Objects: objs, Clock: w.clk, Holder: "a", Batch: 2, LogBatch: 3, ArchiveLogsAfter: time.Hour})
		done := make(chan error, 1)
		go func() {
			_, err := sw.Sweep(ctx)
			done <- err
		}()
		for moving := true; moving; {
			select {
			case err := <-done:
				require.NoError(t, err)
				moving = false
			default:
			}
			require.Equal(t, before, served(t, rd, r, 4))
		}
		require.Zero(t, w.lines(r.ID))
		require.Equal(t, before, served(t, rd, r, 1000))
	})
}

// TestPlanLogMoves: a dry run lists the runs whose logs the next sweep
// would move to the object store (stamped or not yet), not a live run's,
// not before they are due, and nothing once they moved; a run whose logs
// are deleted instead is listed as that.
func TestPlanLogMoves(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s store.Store) {
		w := newWorld(t, s, fsStore(t))
		ctx := sys()
		end := t0.Add(time.Hour)
		stamped, _ := w.run(&end, "", 3)
		w.run(nil, "", 2)
		sw := w.mover("a", nil)

		w.clk.Set(end.Add(30 * time.Minute))
		rep, err := sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, Report{Stamped: 1}, rep)
		plan, err := sw.Plan(ctx, "", 10)
		require.NoError(t, err)
		require.Empty(t, plan, "not due yet")

		unstamped, _ := w.run(&end, "", 4)
		gone, _ := w.run(&end, `{"retention":{"logs":"1h"}}`, 1)
		w.clk.Set(end.Add(time.Hour))
		plan, err = sw.Plan(ctx, "", 10)
		require.NoError(t, err)
		due := end.Add(time.Hour)
		require.ElementsMatch(t, []Planned{
			{Kind: KindLogsMove, Tenant: w.tenant, RunID: stamped.ID, Job: "report", DueAt: due},
			{Kind: KindLogsMove, Tenant: w.tenant, RunID: unstamped.ID, Job: "report", DueAt: due},
			{Kind: "logs", Tenant: w.tenant, RunID: gone.ID, Job: "report", DueAt: due},
		}, plan)
		plan, err = sw.Plan(ctx, "another-tenant", 10)
		require.NoError(t, err)
		require.Empty(t, plan)

		rep, err = sw.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, rep.LogRunsMoved, "%+v", rep)
		require.Equal(t, 1, rep.LogRuns, "%+v", rep)
		plan, err = sw.Plan(ctx, "", 10)
		require.NoError(t, err)
		require.Empty(t, plan, "moved, deleted: nothing left to list")

		// Without an object store to move to, nothing is listed as moving.
		w.run(&end, "", 2)
		plan, err = New(Config{Store: s, Clock: w.clk, DefaultLogs: 30 * day, ArchiveLogsAfter: time.Hour}).Plan(ctx, "", 10)
		require.NoError(t, err)
		require.Empty(t, plan)
	})
}
