package sqlite

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- artifacts and source tickets ----

const artifactCols = `id, tenant, run_id, attempt_id, name, role, max_bytes, expected_size, expected_sha256,
	capability_digest, lease_digest, storage_key, state, size, sha256, expires_at, created_at, stored_at`

func scanArtifact(r scanner) (*store.Artifact, error) {
	a := &store.Artifact{}
	var state string
	err := r.Scan(&a.ID, &a.Tenant, &a.RunID, &a.AttemptID, &a.Name, &a.Role, &a.MaxBytes, &a.ExpectedSize, &a.ExpectedSHA256,
		&a.CapabilityDigest, &a.LeaseDigest, &a.StorageKey, &state, &a.Size, &a.SHA256,
		timeCol{&a.ExpiresAt}, timeCol{&a.CreatedAt}, timePtrCol{&a.StoredAt})
	if err != nil {
		return nil, interpretError(err)
	}
	a.State = store.ArtifactState(state)
	return a, nil
}

func (q *queries) ArtifactCreate(ctx context.Context, a *store.Artifact) error {
	return q.insert(ctx, `INSERT INTO artifacts (`+artifactCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`), ?) RETURNING created_at`,
		[]any{a.ID, a.Tenant, a.RunID, a.AttemptID, a.Name, a.Role, a.MaxBytes, a.ExpectedSize, a.ExpectedSHA256,
			a.CapabilityDigest, a.LeaseDigest, a.StorageKey, string(a.State), a.Size, a.SHA256,
			microsZero(a.ExpiresAt), micros(a.CreatedAt), microsPtr(a.StoredAt)},
		timeCol{&a.CreatedAt})
}

func (q *queries) ArtifactBeginUpload(ctx context.Context, capabilityDigest string, now *time.Time) (*store.Artifact, error) {
	return scanArtifact(q.db.QueryRowContext(ctx, `UPDATE artifacts SET state = 'uploading'
		WHERE capability_digest = ? AND state = 'pending' AND expires_at > coalesce(?, `+nowSQL+`)
		RETURNING `+artifactCols, capabilityDigest, microsPtr(now)))
}

func (q *queries) ArtifactDelete(ctx context.Context, id string) error {
	return q.exec1(ctx, `DELETE FROM artifacts WHERE id = ?`, id)
}

func (q *queries) ArtifactGetByID(ctx context.Context, id string) (*store.Artifact, error) {
	return scanArtifact(q.db.QueryRowContext(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE id = ?`, id))
}

func (q *queries) ArtifactListByRun(ctx context.Context, runID string) ([]*store.Artifact, error) {
	return q.artifacts(ctx, `SELECT `+artifactCols+` FROM artifacts
		WHERE run_id = ? AND state = 'stored' ORDER BY attempt_id, name`, runID)
}

func (q *queries) ArtifactMarkStored(ctx context.Context, a *store.Artifact) error {
	err := q.db.QueryRowContext(ctx, `UPDATE artifacts SET state = 'stored', size = ?, sha256 = ?, stored_at = coalesce(?, `+nowSQL+`)
		WHERE id = ? AND state = 'uploading' RETURNING stored_at`,
		a.Size, a.SHA256, microsPtr(a.StoredAt), a.ID).Scan(timePtrCol{&a.StoredAt})
	if err != nil {
		return interpretError(err)
	}
	a.State = store.ArtifactStored
	return nil
}

const ticketCols = "digest, tenant, run_id, attempt_id, lease_digest, repo, commit_sha, expires_at, used_at, created_at"

func scanTicket(r scanner) (*store.SourceTicket, error) {
	t := &store.SourceTicket{}
	err := r.Scan(&t.Digest, &t.Tenant, &t.RunID, &t.AttemptID, &t.LeaseDigest, &t.Repo, &t.Commit,
		timeCol{&t.ExpiresAt}, timePtrCol{&t.UsedAt}, timeCol{&t.CreatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return t, nil
}

func (q *queries) SourceTicketCreate(ctx context.Context, t *store.SourceTicket) error {
	return q.insert(ctx, `INSERT INTO source_tickets (`+ticketCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`)) RETURNING created_at`,
		[]any{t.Digest, t.Tenant, t.RunID, t.AttemptID, t.LeaseDigest, t.Repo, t.Commit,
			microsZero(t.ExpiresAt), microsPtr(t.UsedAt), micros(t.CreatedAt)},
		timeCol{&t.CreatedAt})
}

func (q *queries) SourceTicketUse(ctx context.Context, digest string, now *time.Time) (*store.SourceTicket, error) {
	return scanTicket(q.db.QueryRowContext(ctx, `UPDATE source_tickets SET used_at = coalesce(?1, `+nowSQL+`)
		WHERE digest = ?2 AND used_at IS NULL AND expires_at > coalesce(?1, `+nowSQL+`)
		RETURNING `+ticketCols, microsPtr(now), digest))
}
