package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- GitHub App ----

const ghInstallationCols = "installation_id, tenant, account_login, account_type, repository_selection, status, created_at, updated_at"

func scanGitHubInstallation(r pgx.Row) (*store.GitHubInstallation, error) {
	in := &store.GitHubInstallation{}
	err := r.Scan(&in.ID, &in.Tenant, &in.Account, &in.AccountType, &in.RepositorySelection, &in.Status, &in.CreatedAt, &in.UpdatedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&in.CreatedAt)
	utc(&in.UpdatedAt)
	return in, nil
}

func (q *queries) GitHubInstallationGet(ctx context.Context, id int64) (*store.GitHubInstallation, error) {
	return scanGitHubInstallation(q.db.QueryRow(ctx, `SELECT `+ghInstallationCols+` FROM github_installations WHERE installation_id = $1`, id))
}

func (q *queries) GitHubInstallationGetByTenant(ctx context.Context, tenant string) (*store.GitHubInstallation, error) {
	return scanGitHubInstallation(q.db.QueryRow(ctx, `SELECT `+ghInstallationCols+` FROM github_installations WHERE tenant = $1`, tenant))
}

func (q *queries) GitHubInstallationPut(ctx context.Context, in *store.GitHubInstallation) error {
	err := q.db.QueryRow(ctx, `INSERT INTO github_installations (`+ghInstallationCols+`)
		VALUES ($2, $3, $4, $5, $6, $7, coalesce($8, `+nowSQL+`), `+nowSQL+`)
		ON CONFLICT (installation_id) DO UPDATE SET account_login = excluded.account_login,
			account_type = excluded.account_type, repository_selection = excluded.repository_selection,
			status = excluded.status, updated_at = excluded.updated_at
		RETURNING tenant, created_at, updated_at`,
		timeArg(in.UpdatedAt), in.ID, in.Tenant, in.Account, in.AccountType, in.RepositorySelection, in.Status, timeArg(in.CreatedAt)).
		Scan(&in.Tenant, &in.CreatedAt, &in.UpdatedAt)
	if err != nil {
		return interpretError(err)
	}
	utc(&in.CreatedAt)
	utc(&in.UpdatedAt)
	return q.announce(ctx, notifyInstallation+in.Tenant)
}

func (q *queries) GitHubRepoPut(ctx context.Context, r *store.GitHubRepo) error {
	err := q.db.QueryRow(ctx, `INSERT INTO github_repositories (installation_id, repo_id, full_name, private, added_at)
		VALUES ($2, $3, $4, $5, `+nowSQL+`)
		ON CONFLICT (installation_id, repo_id) DO UPDATE SET full_name = excluded.full_name, private = excluded.private
		RETURNING added_at`, timeArg(r.AddedAt), r.InstallationID, r.RepoID, r.FullName, r.Private).Scan(&r.AddedAt)
	utc(&r.AddedAt)
	return interpretError(err)
}

func (q *queries) GitHubRepoDelete(ctx context.Context, installationID, repoID int64) error {
	return q.exec1(ctx, `DELETE FROM github_repositories WHERE installation_id = $1 AND repo_id = $2`, installationID, repoID)
}

func (q *queries) GitHubRepoList(ctx context.Context, installationID int64) ([]*store.GitHubRepo, error) {
	rows, err := q.db.Query(ctx, `SELECT installation_id, repo_id, full_name, private, added_at
		FROM github_repositories WHERE installation_id = $1 ORDER BY full_name, repo_id`, installationID)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.GitHubRepo, error) {
		g := &store.GitHubRepo{}
		err := r.Scan(&g.InstallationID, &g.RepoID, &g.FullName, &g.Private, &g.AddedAt)
		utc(&g.AddedAt)
		return g, err
	})
}

func (q *queries) GitHubDeliveryRecord(ctx context.Context, d *store.GitHubDelivery) error {
	err := q.insert(ctx, `INSERT INTO github_deliveries (delivery_id, event, action, installation_id, processed_at)
		VALUES ($2, $3, $4, $5, `+nowSQL+`) ON CONFLICT DO NOTHING RETURNING processed_at`,
		[]any{timeArg(d.ProcessedAt), d.ID, d.Event, d.Action, d.InstallationID}, &d.ProcessedAt)
	utc(&d.ProcessedAt)
	return err
}

func (q *queries) GitHubDeliveryGet(ctx context.Context, deliveryID string) (*store.GitHubDelivery, error) {
	d := &store.GitHubDelivery{}
	err := q.db.QueryRow(ctx, `SELECT delivery_id, event, action, installation_id, processed_at
		FROM github_deliveries WHERE delivery_id = $1`, deliveryID).
		Scan(&d.ID, &d.Event, &d.Action, &d.InstallationID, &d.ProcessedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&d.ProcessedAt)
	return d, nil
}

func (q *queries) GitHubDeliveryPurge(ctx context.Context, before time.Time) (int, error) {
	tag, err := q.db.Exec(ctx, `DELETE FROM github_deliveries WHERE processed_at < $1`, before)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}

const ghCheckRunCols = "run_id, tenant, installation_id, repo, head_sha, name, check_run_id, created_at"

func (q *queries) GitHubCheckRunCreate(ctx context.Context, c *store.GitHubCheckRun) error {
	err := q.insert(ctx, `INSERT INTO github_check_runs (`+ghCheckRunCols+`)
		VALUES ($2, $3, $4, $5, $6, $7, $8, `+nowSQL+`) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{timeArg(c.CreatedAt), c.RunID, c.Tenant, c.InstallationID, c.Repo, c.HeadSHA, c.Name, c.CheckRunID},
		&c.CreatedAt)
	utc(&c.CreatedAt)
	return err
}

func (q *queries) GitHubCheckRunGet(ctx context.Context, runID string) (*store.GitHubCheckRun, error) {
	c := &store.GitHubCheckRun{}
	err := q.db.QueryRow(ctx, `SELECT `+ghCheckRunCols+` FROM github_check_runs WHERE run_id = $1`, runID).
		Scan(&c.RunID, &c.Tenant, &c.InstallationID, &c.Repo, &c.HeadSHA, &c.Name, &c.CheckRunID, &c.CreatedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&c.CreatedAt)
	return c, nil
}

func (q *queries) GitHubCheckRunSetID(ctx context.Context, runID string, checkRunID int64) error {
	return q.exec1(ctx, `UPDATE github_check_runs SET check_run_id = $2 WHERE run_id = $1`, runID, checkRunID)
}

const ghCheckUpdateCols = "seq, run_id, tenant, status, conclusion, title, summary, at, attempts, next_attempt_at, last_error, sent_at, created_at"

func scanGitHubCheckUpdate(r pgx.Row) (*store.GitHubCheckUpdate, error) {
	u := &store.GitHubCheckUpdate{}
	err := r.Scan(&u.Seq, &u.RunID, &u.Tenant, &u.Status, &u.Conclusion, &u.Title, &u.Summary, &u.At,
		&u.Attempts, &u.NextAttemptAt, &u.LastError, &u.SentAt, &u.CreatedAt)
	if err != nil {
		return nil, err
	}
	utc(&u.At)
	utc(&u.NextAttemptAt)
	utcp(&u.SentAt)
	utc(&u.CreatedAt)
	return u, nil
}

func (q *queries) GitHubCheckUpdateAppend(ctx context.Context, u *store.GitHubCheckUpdate) error {
	err := q.db.QueryRow(ctx, `INSERT INTO github_check_outbox
		(run_id, tenant, status, conclusion, title, summary, at, next_attempt_at, created_at)
		VALUES ($2, $3, $4, $5, $6, $7, coalesce($8, `+nowSQL+`), coalesce($9, `+nowSQL+`), `+nowSQL+`)
		RETURNING seq, at, next_attempt_at, created_at`,
		timeArg(u.CreatedAt), u.RunID, u.Tenant, u.Status, u.Conclusion, u.Title, u.Summary, timeArg(u.At), timeArg(u.NextAttemptAt)).
		Scan(&u.Seq, &u.At, &u.NextAttemptAt, &u.CreatedAt)
	utc(&u.At)
	utc(&u.NextAttemptAt)
	utc(&u.CreatedAt)
	return interpretError(err)
}

func (q *queries) GitHubCheckUpdateList(ctx context.Context, runID string) ([]*store.GitHubCheckUpdate, error) {
	rows, err := q.db.Query(ctx, `SELECT `+ghCheckUpdateCols+` FROM github_check_outbox WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.GitHubCheckUpdate, error) { return scanGitHubCheckUpdate(r) })
}

// GitHubCheckClaim locks the runs' Check Run rows with SKIP LOCKED, so
// concurrent dispatchers take different runs; the UPDATE re-checks that an
// entry is still due, so a dispatcher whose snapshot predates another's
// claim of the same run updates nothing (PostgreSQL re-evaluates the WHERE
// clause on the newest row version).
func (q *queries) GitHubCheckClaim(ctx context.Context, p *store.GitHubCheckClaimParams) ([]*store.GitHubCheckUpdate, error) {
	// The due entries are listed against the statement's start, through
	// the outbox's index (sweepNowSQL); the UPDATE re-checks each against
	// the clock.
	rows, err := q.db.Query(ctx, `WITH due AS (
			SELECT run_id, min(next_attempt_at) AS first_due, min(seq) AS first_seq FROM github_check_outbox
			WHERE sent_at IS NULL AND next_attempt_at <= `+sweepNowSQL+`
			GROUP BY run_id ORDER BY first_due, first_seq LIMIT $2
		), locked AS (
			SELECT c.run_id FROM github_check_runs c JOIN due ON due.run_id = c.run_id
			FOR UPDATE OF c SKIP LOCKED
		), claimed AS (
			UPDATE github_check_outbox o SET next_attempt_at = `+nowSQL+` + $3 * interval '1 microsecond'
			FROM locked WHERE o.run_id = locked.run_id AND o.sent_at IS NULL AND o.next_attempt_at <= `+nowSQL+`
			RETURNING o.*
		)
		SELECT DISTINCT ON (run_id) `+ghCheckUpdateCols+` FROM claimed ORDER BY run_id, seq DESC`,
		p.Now, limit(p.Limit), p.Hold.Microseconds())
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.GitHubCheckUpdate, error) { return scanGitHubCheckUpdate(r) })
}

func (q *queries) GitHubCheckMarkSent(ctx context.Context, runID string, upTo int64, lastError string, now *time.Time) error {
	_, err := q.db.Exec(ctx, `UPDATE github_check_outbox SET sent_at = `+nowSQL+`, last_error = $4
		WHERE run_id = $2 AND seq <= $3 AND sent_at IS NULL`, now, runID, upTo, lastError)
	return interpretError(err)
}

func (q *queries) GitHubCheckRetry(ctx context.Context, runID string, upTo int64, next time.Time, lastError string) error {
	_, err := q.db.Exec(ctx, `UPDATE github_check_outbox SET attempts = attempts + 1, next_attempt_at = $3, last_error = $4
		WHERE run_id = $1 AND seq <= $2 AND sent_at IS NULL`, runID, upTo, next, lastError)
	return interpretError(err)
}

func (q *queries) GitHubInstallationList(ctx context.Context) ([]*store.GitHubInstallation, error) {
	rows, err := q.db.Query(ctx, `SELECT `+ghInstallationCols+` FROM github_installations ORDER BY installation_id`)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.GitHubInstallation, error) { return scanGitHubInstallation(r) })
}

func (q *queries) GitHubCheckRunListOpen(ctx context.Context, installationID int64) ([]*store.GitHubCheckRun, error) {
	rows, err := q.db.Query(ctx, `SELECT c.run_id, c.tenant, c.installation_id, c.repo, c.head_sha, c.name, c.check_run_id, c.created_at
		FROM github_check_runs c JOIN runs r ON r.id = c.run_id
		WHERE c.installation_id = $1 AND r.state IN ('pending_approval', 'queued', 'running') ORDER BY c.run_id`, installationID)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.GitHubCheckRun, error) {
		c := &store.GitHubCheckRun{}
		err := r.Scan(&c.RunID, &c.Tenant, &c.InstallationID, &c.Repo, &c.HeadSHA, &c.Name, &c.CheckRunID, &c.CreatedAt)
		utc(&c.CreatedAt)
		return c, err
	})
}
