-- Logs of ended runs moved to the object store (docs/operations.md "Logs in
-- the object store").
--
-- log_archives names, per attempt whose lines were moved, the object that
-- holds them (gzip members of up to 1,000 lines, JSON lines) and where each
-- member starts (blocks: [[first line id, byte offset, lines, bytes
-- uncompressed], ...]), so that a page of the logs API reads one ranged GET.
-- state: 'moving' (object published, some lines may still be in log_lines:
-- readers take either copy of a line, never both), 'stored' (none left),
-- 'deleting' (retention deletes the object, then the row; not served).
CREATE TABLE log_archives (
    attempt_id  text PRIMARY KEY,
    run_id      text NOT NULL,
    tenant      text NOT NULL,
    storage_key text NOT NULL,
    first_id    bigint NOT NULL,
    last_id     bigint NOT NULL,
    lines       bigint NOT NULL,
    size        bigint NOT NULL,
    sha256      text NOT NULL,
    blocks      jsonb NOT NULL,
    state       text NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX log_archives_run ON log_archives (run_id, first_id);
CREATE INDEX log_archives_unfinished ON log_archives (created_at) WHERE state <> 'stored';

-- logs_archived_at: when the run's logs finished moving (NULL: in the
-- database, or not moved because they are kept there).
ALTER TABLE run_retention ADD COLUMN logs_archived_at timestamptz;
CREATE INDEX run_retention_logs_unarchived ON run_retention (finished_at)
    WHERE logs_archived_at IS NULL AND logs_pruned_at IS NULL;

ALTER TABLE log_archives ENABLE ROW LEVEL SECURITY;
ALTER TABLE log_archives FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON log_archives
    USING (jobplane_rls_system() OR tenant = jobplane_rls_tenant())
    WITH CHECK (jobplane_rls_system() OR tenant = jobplane_rls_tenant());
