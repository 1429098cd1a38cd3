-- GitHub App: installations bound to tenants, their repositories, webhook
-- deliveries already processed, and the Check Run outbox (docs/github.md).

-- One installation is one tenant. status: active | suspended | deleted;
-- a deleted installation keeps its row (and tenant) for the audit trail.
CREATE TABLE github_installations (
    installation_id      bigint PRIMARY KEY,
    tenant               text NOT NULL UNIQUE,
    account_login        text NOT NULL,
    account_type         text NOT NULL,
    repository_selection text NOT NULL,
    status               text NOT NULL,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL
);

CREATE TABLE github_repositories (
    installation_id bigint NOT NULL REFERENCES github_installations (installation_id),
    repo_id         bigint NOT NULL,
    full_name       text COLLATE "C" NOT NULL,
    private         boolean NOT NULL,
    added_at        timestamptz NOT NULL,
    PRIMARY KEY (installation_id, repo_id)
);
CREATE INDEX github_repositories_name ON github_repositories (lower(full_name));

-- A delivery is recorded in the transaction that processes it, so a
-- delivery whose processing failed is absent and processed on redelivery.
CREATE TABLE github_deliveries (
    delivery_id     text PRIMARY KEY,
    event           text NOT NULL,
    action          text NOT NULL,
    installation_id bigint NOT NULL,
    processed_at    timestamptz NOT NULL
);
CREATE INDEX github_deliveries_processed ON github_deliveries (processed_at);

-- The Check Run of a jobplane run, and the updates still to send to it.
CREATE TABLE github_check_runs (
    run_id          text PRIMARY KEY,
    tenant          text NOT NULL,
    installation_id bigint NOT NULL,
    repo            text NOT NULL,
    head_sha        text NOT NULL,
    name            text NOT NULL,
    check_run_id    bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL
);

CREATE TABLE github_check_outbox (
    seq             BIGSERIAL PRIMARY KEY,
    run_id          text NOT NULL REFERENCES github_check_runs (run_id),
    tenant          text NOT NULL,
    status          text NOT NULL,
    conclusion      text NOT NULL,
    title           text NOT NULL,
    summary         text NOT NULL,
    at              timestamptz NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error      text NOT NULL DEFAULT '',
    sent_at         timestamptz,
    created_at      timestamptz NOT NULL
);
CREATE INDEX github_check_outbox_due ON github_check_outbox (next_attempt_at) WHERE sent_at IS NULL;
CREATE INDEX github_check_outbox_run ON github_check_outbox (run_id, seq) WHERE sent_at IS NULL;
