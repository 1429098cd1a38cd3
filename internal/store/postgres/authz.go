package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- approvals ----

func (q *queries) ApprovalCreate(ctx context.Context, a *store.Approval) error {
	err := q.insert(ctx, `INSERT INTO approvals (run_id, approver, verdict, comment, at)
		VALUES ($2, $3, $4, $5, `+nowSQL+`) ON CONFLICT DO NOTHING RETURNING at`,
		[]any{timeArg(a.At), a.RunID, a.Approver, a.Verdict, a.Comment}, &a.At)
	utc(&a.At)
	return err
}

func (q *queries) ApprovalListByRun(ctx context.Context, runID string) ([]*store.Approval, error) {
	return q.approvals(ctx, `SELECT run_id, approver, verdict, comment, at FROM approvals
		WHERE run_id = $1 ORDER BY at, approver`, runID)
}

func (q *queries) ApprovalListByRuns(ctx context.Context, runIDs []string) ([]*store.Approval, error) {
	return q.approvals(ctx, `SELECT run_id, approver, verdict, comment, at FROM approvals
		WHERE run_id = ANY($1) ORDER BY run_id, at, approver`, runIDs)
}

func (q *queries) approvals(ctx context.Context, sql string, arg any) ([]*store.Approval, error) {
	rows, err := q.db.Query(ctx, sql, arg)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Approval, error) {
		a := &store.Approval{}
		err := r.Scan(&a.RunID, &a.Approver, &a.Verdict, &a.Comment, &a.At)
		utc(&a.At)
		return a, err
	})
}

func (q *queries) RunListPendingApproval(ctx context.Context, createdBefore time.Time, n int) ([]*store.Run, error) {
	rows, err := q.db.Query(ctx, `SELECT `+runCols+` FROM runs
		WHERE state = 'pending_approval' AND created_at < $1 ORDER BY created_at LIMIT $2`, createdBefore, limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Run, error) { return q.noteRun(scanRun(r)) })
}

// collect scans every row with fn and closes rows.
func collect[T any](rows pgx.Rows, fn func(pgx.Rows) (*T, error)) ([]*T, error) {
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := fn(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, v)
	}
	return out, interpretError(rows.Err())
}

// ---- secrets ----

func (q *queries) SecretGet(ctx context.Context, tenant, name, channel string) (*store.Secret, error) {
	s := &store.Secret{}
	err := q.db.QueryRow(ctx, `SELECT tenant, name, channel, ciphertext, updated_at FROM secrets
		WHERE tenant = $1 AND name = $2 AND channel = $3`, tenant, name, channel).
		Scan(&s.Tenant, &s.Name, &s.Channel, &s.Ciphertext, &s.UpdatedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&s.UpdatedAt)
	return s, nil
}

func (q *queries) SecretPut(ctx context.Context, s *store.Secret) error {
	err := q.db.QueryRow(ctx, `INSERT INTO secrets (tenant, name, channel, ciphertext, updated_at)
		VALUES ($2, $3, $4, $5, `+nowSQL+`)
		ON CONFLICT (tenant, name, channel) DO UPDATE SET ciphertext = excluded.ciphertext, updated_at = excluded.updated_at
		RETURNING updated_at`, timeArg(s.UpdatedAt), s.Tenant, s.Name, s.Channel, s.Ciphertext).Scan(&s.UpdatedAt)
	utc(&s.UpdatedAt)
	return interpretError(err)
}

// ---- signing keys ----

func (q *queries) SigningKeyCreate(ctx context.Context, k *store.SigningKey) error {
	err := q.insert(ctx, `INSERT INTO signing_keys (kid, sealed, created_at, retired_at)
		VALUES ($2, $3, `+nowSQL+`, $4) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{timeArg(k.CreatedAt), k.KID, k.Sealed, k.RetiredAt}, &k.CreatedAt)
	utc(&k.CreatedAt)
	return err
}

func (q *queries) SigningKeyDelete(ctx context.Context, kid string) error {
	return q.exec1(ctx, `DELETE FROM signing_keys WHERE kid = $1`, kid)
}

func (q *queries) SigningKeyList(ctx context.Context) ([]*store.SigningKey, error) {
	rows, err := q.db.Query(ctx, `SELECT kid, sealed, created_at, retired_at FROM signing_keys ORDER BY created_at, kid`)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.SigningKey, error) {
		k := &store.SigningKey{}
		err := r.Scan(&k.KID, &k.Sealed, &k.CreatedAt, &k.RetiredAt)
		utc(&k.CreatedAt)
		utcp(&k.RetiredAt)
		return k, err
	})
}

func (q *queries) SigningKeyRetire(ctx context.Context, kid string, at time.Time) error {
	return q.exec1(ctx, `UPDATE signing_keys SET retired_at = coalesce(retired_at, $1) WHERE kid = $2`, at, kid)
}

// ---- credentials ----

const credentialCols = "c.id, c.tenant, c.run_id, c.attempt_id, c.connector, c.kind, c.ref, c.created_at, c.revoked_at, c.failures"

func (q *queries) CredentialCreate(ctx context.Context, c *store.Credential) error {
	if c.ID == "" {
		c.ID = newID("crd_")
	}
	err := q.insert(ctx, `INSERT INTO credentials (id, tenant, run_id, attempt_id, connector, kind, ref, created_at, revoked_at)
		VALUES ($2, $3, $4, $5, $6, $7, $8, `+nowSQL+`, $9) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{timeArg(c.CreatedAt), c.ID, c.Tenant, c.RunID, c.AttemptID, c.Connector, c.Kind, c.Ref, c.RevokedAt},
		&c.CreatedAt)
	utc(&c.CreatedAt)
	return err
}

func (q *queries) CredentialListToRevoke(ctx context.Context, now *time.Time, n int) ([]*store.Credential, error) {
	rows, err := q.db.Query(ctx, `SELECT `+credentialCols+` FROM credentials c JOIN attempts a ON a.id = c.attempt_id
		WHERE c.revoked_at IS NULL AND (a.state NOT IN ('queued', 'leased')
			OR (a.state = 'leased' AND a.lease_expires_at <= `+nowSQL+`))
		ORDER BY c.failures, c.created_at LIMIT $2`, now, limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Credential, error) {
		c := &store.Credential{}
		err := r.Scan(&c.ID, &c.Tenant, &c.RunID, &c.AttemptID, &c.Connector, &c.Kind, &c.Ref, &c.CreatedAt, &c.RevokedAt, &c.Failures)
		utc(&c.CreatedAt)
		utcp(&c.RevokedAt)
		return c, err
	})
}

func (q *queries) CredentialMarkFailed(ctx context.Context, credID string) error {
	return q.exec1(ctx, `UPDATE credentials SET failures = failures + 1 WHERE id = $1`, credID)
}

func (q *queries) CredentialMarkRevoked(ctx context.Context, credID string, now *time.Time) error {
	return q.exec1(ctx, `UPDATE credentials SET revoked_at = coalesce(revoked_at, `+nowSQL+`) WHERE id = $2`, now, credID)
}
