-- GitHub Actions compatibility mode: the dispatch of each attempt of a job
-- run by a workflow, and the record of the workflow's exchange
-- (docs/github.md). The unique indexes refuse a second exchange by the same
-- workflow run or with the same token.
CREATE TABLE actions_dispatches (
    attempt_id           TEXT PRIMARY KEY,
    run_id               TEXT NOT NULL,
    tenant               TEXT NOT NULL,
    installation_id      INTEGER NOT NULL,
    repo                 TEXT NOT NULL,
    commit_sha           TEXT NOT NULL,
    workflow             TEXT NOT NULL,
    repo_id              INTEGER NOT NULL DEFAULT 0,
    owner_id             INTEGER NOT NULL DEFAULT 0,
    ref                  TEXT NOT NULL DEFAULT '',
    state                TEXT NOT NULL,
    tries                INTEGER NOT NULL DEFAULT 0,
    next_attempt_at      INTEGER NOT NULL,
    last_error           TEXT NOT NULL DEFAULT '',
    dispatched_at        INTEGER,
    exchanged_at         INTEGER,
    workflow_run_id      INTEGER NOT NULL DEFAULT 0,
    workflow_run_attempt INTEGER NOT NULL DEFAULT 0,
    token_id             TEXT NOT NULL DEFAULT '',
    created_at           INTEGER NOT NULL
);
CREATE INDEX actions_dispatches_due ON actions_dispatches (next_attempt_at) WHERE state IN ('pending', 'dispatched');
CREATE UNIQUE INDEX actions_dispatches_workflow_run ON actions_dispatches (repo_id, workflow_run_id, workflow_run_attempt) WHERE workflow_run_id <> 0;
CREATE UNIQUE INDEX actions_dispatches_token ON actions_dispatches (token_id) WHERE token_id <> '';
