-- Retention (docs/operations.md "Retention").
--
-- system_leases elects the one replica that runs a cross-tenant task (the
-- retention sweep): a holder keeps the row while it renews before
-- expires_at; a new holder gets token + 1, and every batch the holder
-- writes re-checks its token under the row's lock, in the same transaction.
CREATE TABLE system_leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    token      bigint NOT NULL,
    expires_at timestamptz NOT NULL
);

-- run_retention fixes, once per ended run, when its logs and artifacts are
-- due for deletion (NULL: kept), and records when they were deleted. The
-- run row itself is never deleted.
CREATE TABLE run_retention (
    run_id              text PRIMARY KEY,
    tenant              text NOT NULL,
    job                 text NOT NULL,
    finished_at         timestamptz NOT NULL,
    logs_due_at         timestamptz,
    artifacts_due_at    timestamptz,
    logs_pruned_at      timestamptz,
    artifacts_pruned_at timestamptz
);
CREATE INDEX run_retention_finished ON run_retention (finished_at);
CREATE INDEX run_retention_logs_due ON run_retention (logs_due_at) WHERE logs_pruned_at IS NULL AND logs_due_at IS NOT NULL;
CREATE INDEX run_retention_artifacts_due ON run_retention (artifacts_due_at)
    WHERE artifacts_pruned_at IS NULL AND artifacts_due_at IS NOT NULL;

-- The sweep finds newly ended runs, expired source tickets, and artifact
-- rows that are not stored, by these.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX source_tickets_expiry ON source_tickets (expires_at);
CREATE INDEX artifacts_unstored ON artifacts (created_at) WHERE state <> 'stored';

ALTER TABLE run_retention ENABLE ROW LEVEL SECURITY;
ALTER TABLE run_retention FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run_retention
    USING (jobplane_rls_system() OR tenant = jobplane_rls_tenant())
    WITH CHECK (jobplane_rls_system() OR tenant = jobplane_rls_tenant());
