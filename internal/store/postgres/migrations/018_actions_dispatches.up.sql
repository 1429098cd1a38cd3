-- GitHub Actions compatibility mode: the dispatch of each attempt of a job
-- run by a workflow, and the record of the workflow's exchange
-- (docs/github.md). The unique indexes refuse a second exchange by the same
-- workflow run or with the same token.
CREATE TABLE actions_dispatches (
    attempt_id           text PRIMARY KEY,
    run_id               text NOT NULL,
    tenant               text NOT NULL,
    installation_id      bigint NOT NULL,
    repo                 text NOT NULL,
    commit_sha           text NOT NULL,
    workflow             text NOT NULL,
    repo_id              bigint NOT NULL DEFAULT 0,
    owner_id             bigint NOT NULL DEFAULT 0,
    ref                  text NOT NULL DEFAULT '',
    state                text NOT NULL,
    tries                integer NOT NULL DEFAULT 0,
    next_attempt_at      timestamptz NOT NULL,
    last_error           text NOT NULL DEFAULT '',
    dispatched_at        timestamptz,
    exchanged_at         timestamptz,
    workflow_run_id      bigint NOT NULL DEFAULT 0,
    workflow_run_attempt bigint NOT NULL DEFAULT 0,
    token_id             text NOT NULL DEFAULT '',
    created_at           timestamptz NOT NULL
);
CREATE INDEX actions_dispatches_due ON actions_dispatches (next_attempt_at) WHERE state IN ('pending', 'dispatched');
CREATE UNIQUE INDEX actions_dispatches_workflow_run ON actions_dispatches (repo_id, workflow_run_id, workflow_run_attempt) WHERE workflow_run_id <> 0;
CREATE UNIQUE INDEX actions_dispatches_token ON actions_dispatches (token_id) WHERE token_id <> '';

ALTER TABLE actions_dispatches ENABLE ROW LEVEL SECURITY;
ALTER TABLE actions_dispatches FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON actions_dispatches
    USING (jobplane_rls_system() OR tenant = jobplane_rls_tenant())
    WITH CHECK (jobplane_rls_system() OR tenant = jobplane_rls_tenant());
