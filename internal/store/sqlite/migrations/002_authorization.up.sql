-- Approvals, run-token signing keys, secrets and per-attempt credentials.

CREATE TABLE approvals (
    run_id   TEXT NOT NULL REFERENCES runs (id),
    approver TEXT NOT NULL,
    verdict  TEXT NOT NULL,
    comment  TEXT NOT NULL,
    at       INTEGER NOT NULL,
    PRIMARY KEY (run_id, approver)
);

CREATE INDEX runs_pending_approval ON runs (created_at) WHERE state = 'pending_approval';

CREATE TABLE signing_keys (
    kid        TEXT PRIMARY KEY,
    sealed     BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    retired_at INTEGER
);

CREATE TABLE secrets (
    tenant     TEXT NOT NULL,
    name       TEXT NOT NULL,
    channel    TEXT NOT NULL,
    ciphertext BLOB NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name, channel)
);

CREATE TABLE credentials (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    attempt_id TEXT NOT NULL REFERENCES attempts (id),
    connector  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    ref        TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER,
    failures   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX credentials_unrevoked ON credentials (created_at) WHERE revoked_at IS NULL;
