-- Retention (docs/operations.md "Retention"); see the PostgreSQL migration
-- of the same number for what each table is.
CREATE TABLE system_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    token      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE TABLE run_retention (
    run_id              TEXT PRIMARY KEY,
    tenant              TEXT NOT NULL,
    job                 TEXT NOT NULL,
    finished_at         INTEGER NOT NULL,
    logs_due_at         INTEGER,
    artifacts_due_at    INTEGER,
    logs_pruned_at      INTEGER,
    artifacts_pruned_at INTEGER
);
CREATE INDEX run_retention_finished ON run_retention (finished_at);
CREATE INDEX run_retention_logs_due ON run_retention (logs_due_at) WHERE logs_pruned_at IS NULL AND logs_due_at IS NOT NULL;
CREATE INDEX run_retention_artifacts_due ON run_retention (artifacts_due_at)
    WHERE artifacts_pruned_at IS NULL AND artifacts_due_at IS NOT NULL;

CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX source_tickets_expiry ON source_tickets (expires_at);
CREATE INDEX artifacts_unstored ON artifacts (created_at) WHERE state <> 'stored';
