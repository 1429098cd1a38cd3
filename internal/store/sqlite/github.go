package sqlite

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- GitHub App ----

const ghInstallationCols = "installation_id, tenant, account_login, account_type, repository_selection, status, created_at, updated_at"

func scanGitHubInstallation(r scanner) (*store.GitHubInstallation, error) {
	in := &store.GitHubInstallation{}
	err := r.Scan(&in.ID, &in.Tenant, &in.Account, &in.AccountType, &in.RepositorySelection, &in.Status,
		timeCol{&in.CreatedAt}, timeCol{&in.UpdatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return in, nil
}

func (q *queries) GitHubInstallationGet(ctx context.Context, id int64) (*store.GitHubInstallation, error) {
	return scanGitHubInstallation(q.db.QueryRowContext(ctx, `SELECT `+ghInstallationCols+` FROM github_installations WHERE installation_id = ?`, id))
}

func (q *queries) GitHubInstallationGetByTenant(ctx context.Context, tenant string) (*store.GitHubInstallation, error) {
	return scanGitHubInstallation(q.db.QueryRowContext(ctx, `SELECT `+ghInstallationCols+` FROM github_installations WHERE tenant = ?`, tenant))
}

func (q *queries) GitHubInstallationPut(ctx context.Context, in *store.GitHubInstallation) error {
	if in.Tenant != "" {
		q.changed(func() { q.s.CachedReads.Installs.Forget(in.Tenant) })
	}
	defer func() {
		tenant := in.Tenant // the row's, as RETURNING gave it
		q.changed(func() { q.s.CachedReads.Installs.Forget(tenant) })
	}()
	return interpretError(q.db.QueryRowContext(ctx, `INSERT INTO github_installations (`+ghInstallationCols+`)
		VALUES (?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`), coalesce(?, `+nowSQL+`))
		ON CONFLICT (installation_id) DO UPDATE SET account_login = excluded.account_login,
			account_type = excluded.account_type, repository_selection = excluded.repository_selection,
			status = excluded.status, updated_at = excluded.updated_at
		RETURNING tenant, created_at, updated_at`,
		in.ID, in.Tenant, in.Account, in.AccountType, in.RepositorySelection, in.Status, micros(in.CreatedAt), micros(in.UpdatedAt)).
		Scan(&in.Tenant, timeCol{&in.CreatedAt}, timeCol{&in.UpdatedAt}))
}

func (q *queries) GitHubRepoPut(ctx context.Context, r *store.GitHubRepo) error {
	return interpretError(q.db.QueryRowContext(ctx, `INSERT INTO github_repositories (installation_id, repo_id, full_name, private, added_at)
		VALUES (?, ?, ?, ?, coalesce(?, `+nowSQL+`))
		ON CONFLICT (installation_id, repo_id) DO UPDATE SET full_name = excluded.full_name, private = excluded.private
		RETURNING added_at`, r.InstallationID, r.RepoID, r.FullName, r.Private, micros(r.AddedAt)).Scan(timeCol{&r.AddedAt}))
}

func (q *queries) GitHubRepoDelete(ctx context.Context, installationID, repoID int64) error {
	return q.exec1(ctx, `DELETE FROM github_repositories WHERE installation_id = ? AND repo_id = ?`, installationID, repoID)
}

func (q *queries) GitHubRepoList(ctx context.Context, installationID int64) ([]*store.GitHubRepo, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT installation_id, repo_id, full_name, private, added_at
		FROM github_repositories WHERE installation_id = ? ORDER BY full_name, repo_id`, installationID)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.GitHubRepo
	for rows.Next() {
		r := &store.GitHubRepo{}
		if err := rows.Scan(&r.InstallationID, &r.RepoID, &r.FullName, &r.Private, timeCol{&r.AddedAt}); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, r)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) GitHubDeliveryRecord(ctx context.Context, d *store.GitHubDelivery) error {
	return q.insert(ctx, `INSERT INTO github_deliveries (delivery_id, event, action, installation_id, processed_at)
		VALUES (?, ?, ?, ?, coalesce(?, `+nowSQL+`)) ON CONFLICT DO NOTHING RETURNING processed_at`,
		[]any{d.ID, d.Event, d.Action, d.InstallationID, micros(d.ProcessedAt)}, timeCol{&d.ProcessedAt})
}

func (q *queries) GitHubDeliveryGet(ctx context.Context, deliveryID string) (*store.GitHubDelivery, error) {
	d := &store.GitHubDelivery{}
	err := q.db.QueryRowContext(ctx, `SELECT delivery_id, event, action, installation_id, processed_at
		FROM github_deliveries WHERE delivery_id = ?`, deliveryID).
		Scan(&d.ID, &d.Event, &d.Action, &d.InstallationID, timeCol{&d.ProcessedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return d, nil
}

func (q *queries) GitHubDeliveryPurge(ctx context.Context, before time.Time) (int, error) {
	res, err := q.db.ExecContext(ctx, `DELETE FROM github_deliveries WHERE processed_at < ?`, before.UnixMicro())
	if err != nil {
		return 0, interpretError(err)
	}
	n, err := res.RowsAffected()
	return int(n), interpretError(err)
}

const ghCheckRunCols = "run_id, tenant, installation_id, repo, head_sha, name, check_run_id, created_at"

func (q *queries) GitHubCheckRunCreate(ctx context.Context, c *store.GitHubCheckRun) error {
	return q.insert(ctx, `INSERT INTO github_check_runs (`+ghCheckRunCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`)) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{c.RunID, c.Tenant, c.InstallationID, c.Repo, c.HeadSHA, c.Name, c.CheckRunID, micros(c.CreatedAt)},
		timeCol{&c.CreatedAt})
}

func (q *queries) GitHubCheckRunGet(ctx context.Context, runID string) (*store.GitHubCheckRun, error) {
	c := &store.GitHubCheckRun{}
	err := q.db.QueryRowContext(ctx, `SELECT `+ghCheckRunCols+` FROM github_check_runs WHERE run_id = ?`, runID).
		Scan(&c.RunID, &c.Tenant, &c.InstallationID, &c.Repo, &c.HeadSHA, &c.Name, &c.CheckRunID, timeCol{&c.CreatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return c, nil
}

func (q *queries) GitHubCheckRunSetID(ctx context.Context, runID string, checkRunID int64) error {
	return q.exec1(ctx, `UPDATE github_check_runs SET check_run_id = ? WHERE run_id = ?`, checkRunID, runID)
}

const ghCheckUpdateCols = "seq, run_id, tenant, status, conclusion, title, summary, at, attempts, next_attempt_at, last_error, sent_at, created_at"

func scanGitHubCheckUpdate(r scanner) (*store.GitHubCheckUpdate, error) {
	u := &store.GitHubCheckUpdate{}
	err := r.Scan(&u.Seq, &u.RunID, &u.Tenant, &u.Status, &u.Conclusion, &u.Title, &u.Summary, timeCol{&u.At},
		&u.Attempts, timeCol{&u.NextAttemptAt}, &u.LastError, timePtrCol{&u.SentAt}, timeCol{&u.CreatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return u, nil
}

func (q *queries) GitHubCheckUpdateAppend(ctx context.Context, u *store.GitHubCheckUpdate) error {
	return interpretError(q.db.QueryRowContext(ctx, `INSERT INTO github_check_outbox
		(run_id, tenant, status, conclusion, title, summary, at, next_attempt_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`), coalesce(?, `+nowSQL+`), coalesce(?, `+nowSQL+`))
		RETURNING seq, at, next_attempt_at, created_at`,
		u.RunID, u.Tenant, u.Status, u.Conclusion, u.Title, u.Summary, micros(u.At), micros(u.NextAttemptAt), micros(u.CreatedAt)).
		Scan(&u.Seq, timeCol{&u.At}, timeCol{&u.NextAttemptAt}, timeCol{&u.CreatedAt}))
}

func (q *queries) GitHubCheckUpdateList(ctx context.Context, runID string) ([]*store.GitHubCheckUpdate, error) {
	return q.listCheckUpdates(ctx, `SELECT `+ghCheckUpdateCols+` FROM github_check_outbox WHERE run_id = ? ORDER BY seq`, runID)
}

func (q *queries) listCheckUpdates(ctx context.Context, query string, args ...any) ([]*store.GitHubCheckUpdate, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.GitHubCheckUpdate
	for rows.Next() {
		u, err := scanGitHubCheckUpdate(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, interpretError(rows.Err())
}

// GitHubCheckClaim runs as one transaction (the write gate serializes it
// with every other writer, which is all the exclusion SQLite needs).
func (q *queries) GitHubCheckClaim(ctx context.Context, p *store.GitHubCheckClaimParams) ([]*store.GitHubCheckUpdate, error) {
	now := microsPtr(p.Now)
	rows, err := q.db.QueryContext(ctx, `SELECT run_id FROM github_check_outbox
		WHERE sent_at IS NULL AND next_attempt_at <= coalesce(?, `+nowSQL+`)
		GROUP BY run_id ORDER BY min(next_attempt_at), min(seq) LIMIT ?`, now, limit(p.Limit))
	if err != nil {
		return nil, interpretError(err)
	}
	var runs []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			rows.Close()
			return nil, interpretError(err)
		}
		runs = append(runs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	var out []*store.GitHubCheckUpdate
	for _, runID := range runs {
		if _, err := q.db.ExecContext(ctx, `UPDATE github_check_outbox SET next_attempt_at = coalesce(?, `+nowSQL+`) + ?
			WHERE run_id = ? AND sent_at IS NULL`, now, p.Hold.Microseconds(), runID); err != nil {
			return nil, interpretError(err)
		}
		u, err := scanGitHubCheckUpdate(q.db.QueryRowContext(ctx, `SELECT `+ghCheckUpdateCols+` FROM github_check_outbox
			WHERE run_id = ? AND sent_at IS NULL ORDER BY seq DESC LIMIT 1`, runID))
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

func (q *queries) GitHubCheckMarkSent(ctx context.Context, runID string, upTo int64, lastError string, now *time.Time) error {
	_, err := q.db.ExecContext(ctx, `UPDATE github_check_outbox SET sent_at = coalesce(?, `+nowSQL+`), last_error = ?
		WHERE run_id = ? AND seq <= ? AND sent_at IS NULL`, microsPtr(now), lastError, runID, upTo)
	return interpretError(err)
}

func (q *queries) GitHubCheckRetry(ctx context.Context, runID string, upTo int64, next time.Time, lastError string) error {
	_, err := q.db.ExecContext(ctx, `UPDATE github_check_outbox SET attempts = attempts + 1, next_attempt_at = ?, last_error = ?
		WHERE run_id = ? AND seq <= ? AND sent_at IS NULL`, next.UnixMicro(), lastError, runID, upTo)
	return interpretError(err)
}

// Writes outside a transaction go through the write gate.

// GitHubInstallationPut writes a binding behind the write gate.
func (s *Store) GitHubInstallationPut(ctx context.Context, in *store.GitHubInstallation) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubInstallationPut(ctx, in) })
}

// GitHubRepoPut writes a repository behind the write gate.
func (s *Store) GitHubRepoPut(ctx context.Context, r *store.GitHubRepo) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubRepoPut(ctx, r) })
}

// GitHubRepoDelete removes a repository behind the write gate.
func (s *Store) GitHubRepoDelete(ctx context.Context, installationID, repoID int64) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubRepoDelete(ctx, installationID, repoID) })
}

// GitHubDeliveryRecord records a delivery behind the write gate.
func (s *Store) GitHubDeliveryRecord(ctx context.Context, d *store.GitHubDelivery) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubDeliveryRecord(ctx, d) })
}

// GitHubDeliveryPurge forgets old deliveries behind the write gate.
func (s *Store) GitHubDeliveryPurge(ctx context.Context, before time.Time) (n int, err error) {
	err = s.gated(ctx, func(q *queries) error {
		n, err = q.GitHubDeliveryPurge(ctx, before)
		return err
	})
	return n, err
}

// GitHubCheckRunCreate records a Check Run behind the write gate.
func (s *Store) GitHubCheckRunCreate(ctx context.Context, c *store.GitHubCheckRun) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubCheckRunCreate(ctx, c) })
}

// GitHubCheckRunSetID records a Check Run's ID behind the write gate.
func (s *Store) GitHubCheckRunSetID(ctx context.Context, runID string, checkRunID int64) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubCheckRunSetID(ctx, runID, checkRunID) })
}

// GitHubCheckUpdateAppend queues an update behind the write gate.
func (s *Store) GitHubCheckUpdateAppend(ctx context.Context, u *store.GitHubCheckUpdate) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubCheckUpdateAppend(ctx, u) })
}

// GitHubCheckClaim claims due updates in one gated transaction.
func (s *Store) GitHubCheckClaim(ctx context.Context, p *store.GitHubCheckClaimParams) (out []*store.GitHubCheckUpdate, err error) {
	err = s.gated(ctx, func(q *queries) error {
		out, err = q.GitHubCheckClaim(ctx, p)
		return err
	})
	return out, err
}

// GitHubCheckMarkSent marks updates sent behind the write gate.
func (s *Store) GitHubCheckMarkSent(ctx context.Context, runID string, upTo int64, lastError string, now *time.Time) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubCheckMarkSent(ctx, runID, upTo, lastError, now) })
}

// GitHubCheckRetry schedules a retry behind the write gate.
func (s *Store) GitHubCheckRetry(ctx context.Context, runID string, upTo int64, next time.Time, lastError string) error {
	return s.gated(ctx, func(q *queries) error { return q.GitHubCheckRetry(ctx, runID, upTo, next, lastError) })
}

func (q *queries) GitHubInstallationList(ctx context.Context) ([]*store.GitHubInstallation, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT `+ghInstallationCols+` FROM github_installations ORDER BY installation_id`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.GitHubInstallation
	for rows.Next() {
		in, err := scanGitHubInstallation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) GitHubCheckRunListOpen(ctx context.Context, installationID int64) ([]*store.GitHubCheckRun, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT c.run_id, c.tenant, c.installation_id, c.repo, c.head_sha, c.name, c.check_run_id, c.created_at
		FROM github_check_runs c JOIN runs r ON r.id = c.run_id
		WHERE c.installation_id = ? AND r.state IN ('pending_approval', 'queued', 'running') ORDER BY c.run_id`, installationID)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.GitHubCheckRun
	for rows.Next() {
		c := &store.GitHubCheckRun{}
		if err := rows.Scan(&c.RunID, &c.Tenant, &c.InstallationID, &c.Repo, &c.HeadSHA, &c.Name, &c.CheckRunID, timeCol{&c.CreatedAt}); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, c)
	}
	return out, interpretError(rows.Err())
}
