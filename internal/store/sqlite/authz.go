package sqlite

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- approvals ----

func (q *queries) ApprovalCreate(ctx context.Context, a *store.Approval) error {
	return q.insert(ctx, `INSERT INTO approvals (run_id, approver, verdict, comment, at)
		VALUES (?, ?, ?, ?, coalesce(?, `+nowSQL+`)) ON CONFLICT DO NOTHING RETURNING at`,
		[]any{a.RunID, a.Approver, a.Verdict, a.Comment, micros(a.At)}, timeCol{&a.At})
}

func (q *queries) ApprovalListByRun(ctx context.Context, runID string) ([]*store.Approval, error) {
	return q.approvals(ctx, `SELECT run_id, approver, verdict, comment, at FROM approvals
		WHERE run_id = ? ORDER BY at, approver`, runID)
}

func (q *queries) ApprovalListByRuns(ctx context.Context, runIDs []string) ([]*store.Approval, error) {
	return q.approvals(ctx, `SELECT run_id, approver, verdict, comment, at FROM approvals
		WHERE run_id IN (SELECT value FROM json_each(?)) ORDER BY run_id, at, approver`, listText(runIDs))
}

func (q *queries) approvals(ctx context.Context, query string, arg any) ([]*store.Approval, error) {
	rows, err := q.db.QueryContext(ctx, query, arg)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.Approval
	for rows.Next() {
		a := &store.Approval{}
		if err := rows.Scan(&a.RunID, &a.Approver, &a.Verdict, &a.Comment, timeCol{&a.At}); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, a)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) RunListPendingApproval(ctx context.Context, createdBefore time.Time, n int) ([]*store.Run, error) {
	return q.runs(ctx, `SELECT `+runCols+` FROM runs
		WHERE state = 'pending_approval' AND created_at < ? ORDER BY created_at LIMIT ?`,
		createdBefore.UnixMicro(), limit(n))
}

// ---- secrets ----

func (q *queries) SecretGet(ctx context.Context, tenant, name, channel string) (*store.Secret, error) {
	s := &store.Secret{}
	err := q.db.QueryRowContext(ctx, `SELECT tenant, name, channel, ciphertext, updated_at FROM secrets
		WHERE tenant = ? AND name = ? AND channel = ?`, tenant, name, channel).
		Scan(&s.Tenant, &s.Name, &s.Channel, &s.Ciphertext, timeCol{&s.UpdatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return s, nil
}

func (q *queries) SecretPut(ctx context.Context, s *store.Secret) error {
	return interpretError(q.db.QueryRowContext(ctx, `INSERT INTO secrets (tenant, name, channel, ciphertext, updated_at)
		VALUES (?1, ?2, ?3, ?4, coalesce(?5, `+nowSQL+`))
		ON CONFLICT (tenant, name, channel) DO UPDATE SET ciphertext = excluded.ciphertext, updated_at = excluded.updated_at
		RETURNING updated_at`, s.Tenant, s.Name, s.Channel, s.Ciphertext, micros(s.UpdatedAt)).Scan(timeCol{&s.UpdatedAt}))
}

// ---- signing keys ----

func (q *queries) SigningKeyCreate(ctx context.Context, k *store.SigningKey) error {
	return q.insert(ctx, `INSERT INTO signing_keys (kid, sealed, created_at, retired_at)
		VALUES (?, ?, coalesce(?, `+nowSQL+`), ?) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{k.KID, k.Sealed, micros(k.CreatedAt), microsPtr(k.RetiredAt)}, timeCol{&k.CreatedAt})
}

func (q *queries) SigningKeyDelete(ctx context.Context, kid string) error {
	return q.exec1(ctx, `DELETE FROM signing_keys WHERE kid = ?`, kid)
}

func (q *queries) SigningKeyList(ctx context.Context) ([]*store.SigningKey, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT kid, sealed, created_at, retired_at FROM signing_keys ORDER BY created_at, kid`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.SigningKey
	for rows.Next() {
		k := &store.SigningKey{}
		if err := rows.Scan(&k.KID, &k.Sealed, timeCol{&k.CreatedAt}, timePtrCol{&k.RetiredAt}); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, k)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) SigningKeyRetire(ctx context.Context, kid string, at time.Time) error {
	return q.exec1(ctx, `UPDATE signing_keys SET retired_at = coalesce(retired_at, ?) WHERE kid = ?`, at.UnixMicro(), kid)
}

// ---- credentials ----

const credentialCols = "c.id, c.tenant, c.run_id, c.attempt_id, c.connector, c.kind, c.ref, c.created_at, c.revoked_at, c.failures"

func (q *queries) CredentialCreate(ctx context.Context, c *store.Credential) error {
	if c.ID == "" {
		c.ID = newID("crd_")
	}
	return q.insert(ctx, `INSERT INTO credentials (id, tenant, run_id, attempt_id, connector, kind, ref, created_at, revoked_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`), ?) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{c.ID, c.Tenant, c.RunID, c.AttemptID, c.Connector, c.Kind, c.Ref, micros(c.CreatedAt), microsPtr(c.RevokedAt)},
		timeCol{&c.CreatedAt})
}

func (q *queries) CredentialListToRevoke(ctx context.Context, now *time.Time, n int) ([]*store.Credential, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT `+credentialCols+` FROM credentials c JOIN attempts a ON a.id = c.attempt_id
		WHERE c.revoked_at IS NULL AND (a.state NOT IN ('queued', 'leased')
			OR (a.state = 'leased' AND a.lease_expires_at <= coalesce(?1, `+nowSQL+`)))
		ORDER BY c.failures, c.created_at LIMIT ?2`, microsPtr(now), limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.Credential
	for rows.Next() {
		c := &store.Credential{}
		if err := rows.Scan(&c.ID, &c.Tenant, &c.RunID, &c.AttemptID, &c.Connector, &c.Kind, &c.Ref,
			timeCol{&c.CreatedAt}, timePtrCol{&c.RevokedAt}, &c.Failures); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, c)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) CredentialMarkFailed(ctx context.Context, credID string) error {
	return q.exec1(ctx, `UPDATE credentials SET failures = failures + 1 WHERE id = ?`, credID)
}

func (q *queries) CredentialMarkRevoked(ctx context.Context, credID string, now *time.Time) error {
	return q.exec1(ctx, `UPDATE credentials SET revoked_at = coalesce(revoked_at, ?, `+nowSQL+`) WHERE id = ?`,
		microsPtr(now), credID)
}
