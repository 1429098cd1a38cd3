-- GitHub App: installations bound to tenants, their repositories, webhook
-- deliveries already processed, and the Check Run outbox (docs/github.md).

-- One installation is one tenant. status: active | suspended | deleted;
-- a deleted installation keeps its row (and tenant) for the audit trail.
CREATE TABLE github_installations (
    installation_id      INTEGER PRIMARY KEY,
    tenant               TEXT NOT NULL UNIQUE,
    account_login        TEXT NOT NULL,
    account_type         TEXT NOT NULL,
    repository_selection TEXT NOT NULL,
    status               TEXT NOT NULL,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
);

CREATE TABLE github_repositories (
    installation_id INTEGER NOT NULL REFERENCES github_installations (installation_id),
    repo_id         INTEGER NOT NULL,
    full_name       TEXT NOT NULL,
    private         INTEGER NOT NULL,
    added_at        INTEGER NOT NULL,
    PRIMARY KEY (installation_id, repo_id)
);
CREATE INDEX github_repositories_name ON github_repositories (lower(full_name));

-- A delivery is recorded in the transaction that processes it, so a
-- delivery whose processing failed is absent and processed on redelivery.
CREATE TABLE github_deliveries (
    delivery_id     TEXT PRIMARY KEY,
    event           TEXT NOT NULL,
    action          TEXT NOT NULL,
    installation_id INTEGER NOT NULL,
    processed_at    INTEGER NOT NULL
);
CREATE INDEX github_deliveries_processed ON github_deliveries (processed_at);

-- The Check Run of a jobplane run, and the updates still to send to it.
CREATE TABLE github_check_runs (
    run_id          TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    installation_id INTEGER NOT NULL,
    repo            TEXT NOT NULL,
    head_sha        TEXT NOT NULL,
    name            TEXT NOT NULL,
    check_run_id    INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL
);

CREATE TABLE github_check_outbox (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id          TEXT NOT NULL REFERENCES github_check_runs (run_id),
    tenant          TEXT NOT NULL,
    status          TEXT NOT NULL,
    conclusion      TEXT NOT NULL,
    title           TEXT NOT NULL,
    summary         TEXT NOT NULL,
    at              INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT NOT NULL DEFAULT '',
    sent_at         INTEGER,
    created_at      INTEGER NOT NULL
);
CREATE INDEX github_check_outbox_due ON github_check_outbox (next_attempt_at) WHERE sent_at IS NULL;
CREATE INDEX github_check_outbox_run ON github_check_outbox (run_id, seq) WHERE sent_at IS NULL;
