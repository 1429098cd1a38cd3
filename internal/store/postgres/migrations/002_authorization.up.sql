-- Approvals, run-token signing keys, secrets and per-attempt credentials.

CREATE TABLE approvals (
    run_id   text NOT NULL REFERENCES runs (id),
    approver text NOT NULL,
    verdict  text NOT NULL,
    comment  text NOT NULL,
    at       timestamptz NOT NULL,
    PRIMARY KEY (run_id, approver)
);

CREATE INDEX runs_pending_approval ON runs (created_at) WHERE state = 'pending_approval';

CREATE TABLE signing_keys (
    kid        text PRIMARY KEY,
    sealed     bytea NOT NULL,
    created_at timestamptz NOT NULL,
    retired_at timestamptz
);

CREATE TABLE secrets (
    tenant     text NOT NULL,
    name       text NOT NULL,
    channel    text NOT NULL,
    ciphertext bytea NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, name, channel)
);

CREATE TABLE credentials (
    id         text PRIMARY KEY,
    tenant     text NOT NULL,
    run_id     text NOT NULL,
    attempt_id text NOT NULL REFERENCES attempts (id),
    connector  text NOT NULL,
    kind       text NOT NULL,
    ref        text NOT NULL,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz,
    failures   integer NOT NULL DEFAULT 0
);
CREATE INDEX credentials_unrevoked ON credentials (created_at) WHERE revoked_at IS NULL;
