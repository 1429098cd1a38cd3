package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- artifacts and source tickets ----

const artifactCols = `id, tenant, run_id, attempt_id, name, role, max_bytes, expected_size, expected_sha256,
	capability_digest, lease_digest, storage_key, state, size, sha256, expires_at, created_at, stored_at`

func scanArtifact(r pgx.Row) (*store.Artifact, error) {
	a := &store.Artifact{}
	var state string
	err := r.Scan(&a.ID, &a.Tenant, &a.RunID, &a.AttemptID, &a.Name, &a.Role, &a.MaxBytes, &a.ExpectedSize, &a.ExpectedSHA256,
		&a.CapabilityDigest, &a.LeaseDigest, &a.StorageKey, &state, &a.Size, &a.SHA256,
		&a.ExpiresAt, &a.CreatedAt, &a.StoredAt)
	if err != nil {
		return nil, interpretError(err)
	}
	a.State = store.ArtifactState(state)
	utc(&a.ExpiresAt)
	utc(&a.CreatedAt)
	utcp(&a.StoredAt)
	return a, nil
}

func (q *queries) ArtifactCreate(ctx context.Context, a *store.Artifact) error {
	err := q.insert(ctx, `INSERT INTO artifacts (`+artifactCols+`)
		VALUES ($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, `+nowSQL+`, $18) RETURNING created_at`,
		[]any{timeArg(a.CreatedAt), a.ID, a.Tenant, a.RunID, a.AttemptID, a.Name, a.Role, a.MaxBytes, a.ExpectedSize, a.ExpectedSHA256,
			a.CapabilityDigest, a.LeaseDigest, a.StorageKey, string(a.State), a.Size, a.SHA256, a.ExpiresAt, a.StoredAt},
		&a.CreatedAt)
	utc(&a.CreatedAt)
	return err
}

func (q *queries) ArtifactBeginUpload(ctx context.Context, capabilityDigest string, now *time.Time) (*store.Artifact, error) {
	return scanArtifact(q.db.QueryRow(ctx, `UPDATE artifacts SET state = 'uploading'
		WHERE capability_digest = $2 AND state = 'pending' AND expires_at > `+nowSQL+`
		RETURNING `+artifactCols, now, capabilityDigest))
}

func (q *queries) ArtifactDelete(ctx context.Context, id string) error {
	return q.exec1(ctx, `DELETE FROM artifacts WHERE id = $1`, id)
}

func (q *queries) ArtifactGetByID(ctx context.Context, id string) (*store.Artifact, error) {
	return scanArtifact(q.db.QueryRow(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE id = $1`, id))
}

func (q *queries) ArtifactListByRun(ctx context.Context, runID string) ([]*store.Artifact, error) {
	rows, err := q.db.Query(ctx, `SELECT `+artifactCols+` FROM artifacts
		WHERE run_id = $1 AND state = 'stored' ORDER BY attempt_id COLLATE "C", name COLLATE "C"`, runID)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Artifact, error) { return scanArtifact(r) })
}

func (q *queries) ArtifactMarkStored(ctx context.Context, a *store.Artifact) error {
	err := q.db.QueryRow(ctx, `UPDATE artifacts SET state = 'stored', size = $2, sha256 = $3, stored_at = `+nowSQL+`
		WHERE id = $4 AND state = 'uploading' RETURNING stored_at`,
		a.StoredAt, a.Size, a.SHA256, a.ID).Scan(&a.StoredAt)
	if err != nil {
		return interpretError(err)
	}
	utcp(&a.StoredAt)
	a.State = store.ArtifactStored
	return nil
}

const ticketCols = "digest, tenant, run_id, attempt_id, lease_digest, repo, commit_sha, expires_at, used_at, created_at"

func scanTicket(r pgx.Row) (*store.SourceTicket, error) {
	t := &store.SourceTicket{}
	err := r.Scan(&t.Digest, &t.Tenant, &t.RunID, &t.AttemptID, &t.LeaseDigest, &t.Repo, &t.Commit, &t.ExpiresAt, &t.UsedAt, &t.CreatedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&t.ExpiresAt)
	utcp(&t.UsedAt)
	utc(&t.CreatedAt)
	return t, nil
}

func (q *queries) SourceTicketCreate(ctx context.Context, t *store.SourceTicket) error {
	err := q.insert(ctx, `INSERT INTO source_tickets (`+ticketCols+`)
		VALUES ($2, $3, $4, $5, $6, $7, $8, $9, $10, `+nowSQL+`) RETURNING created_at`,
		[]any{timeArg(t.CreatedAt), t.Digest, t.Tenant, t.RunID, t.AttemptID, t.LeaseDigest, t.Repo, t.Commit, t.ExpiresAt, t.UsedAt},
		&t.CreatedAt)
	utc(&t.CreatedAt)
	return err
}

func (q *queries) SourceTicketUse(ctx context.Context, digest string, now *time.Time) (*store.SourceTicket, error) {
	return scanTicket(q.db.QueryRow(ctx, `UPDATE source_tickets SET used_at = `+nowSQL+`
		WHERE digest = $2 AND used_at IS NULL AND expires_at > `+nowSQL+`
		RETURNING `+ticketCols, now, digest))
}
