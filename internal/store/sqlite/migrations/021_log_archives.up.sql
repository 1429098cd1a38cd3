-- Logs of ended runs moved to the object store (docs/operations.md "Logs in
-- the object store"); see the PostgreSQL migration of the same number.
CREATE TABLE log_archives (
    attempt_id  TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    storage_key TEXT NOT NULL,
    first_id    INTEGER NOT NULL,
    last_id     INTEGER NOT NULL,
    lines       INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    sha256      TEXT NOT NULL,
    blocks      TEXT NOT NULL,
    state       TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX log_archives_run ON log_archives (run_id, first_id);
CREATE INDEX log_archives_unfinished ON log_archives (created_at) WHERE state <> 'stored';

ALTER TABLE run_retention ADD COLUMN logs_archived_at INTEGER;
CREATE INDEX run_retention_logs_unarchived ON run_retention (finished_at)
    WHERE logs_archived_at IS NULL AND logs_pruned_at IS NULL;
