-- Times are INTEGER unix microseconds UTC; durations INTEGER microseconds;
-- JSON and string lists are TEXT holding JSON.

CREATE TABLE tenants (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);

CREATE TABLE principals (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    admin      INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    UNIQUE (tenant, name)
);

CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,
    principal_id TEXT NOT NULL REFERENCES principals (id),
    digest       TEXT NOT NULL UNIQUE,
    expires_at   INTEGER,
    revoked_at   INTEGER,
    created_at   INTEGER NOT NULL
);

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    job              TEXT NOT NULL,
    channel          TEXT NOT NULL,
    ref              TEXT NOT NULL,
    commit_sha       TEXT NOT NULL,
    params           TEXT,
    actor            TEXT NOT NULL,
    reason           TEXT NOT NULL,
    source           TEXT,
    idempotency_key  TEXT NOT NULL,
    state            TEXT NOT NULL,
    decision         TEXT,
    grants           TEXT,
    lease_keys       TEXT,
    waiting_for      TEXT NOT NULL,
    spec             TEXT,
    max_attempts     INTEGER NOT NULL,
    counted_attempts INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    finished_at      INTEGER
);
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, actor, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX runs_tenant_id ON runs (tenant, id);

CREATE TABLE attempts (
    id               TEXT PRIMARY KEY,
    run_id           TEXT NOT NULL REFERENCES runs (id),
    tenant           TEXT NOT NULL,
    number           INTEGER NOT NULL,
    state            TEXT NOT NULL,
    pool             TEXT NOT NULL,
    labels           TEXT NOT NULL DEFAULT '[]',
    lease_ttl_us     INTEGER NOT NULL,
    timeout_us       INTEGER NOT NULL,
    not_before       INTEGER NOT NULL,
    runner_id        TEXT NOT NULL,
    lease_digest     TEXT NOT NULL,
    claim_request_id TEXT NOT NULL,
    claimed_at       INTEGER,
    lease_expires_at INTEGER,
    deadline         INTEGER,
    heartbeat_at     INTEGER,
    ended_at         INTEGER,
    result           TEXT,
    created_at       INTEGER NOT NULL,
    UNIQUE (run_id, number)
);
-- RELIABILITY C8: at most one live attempt per run, whatever the callers do.
CREATE UNIQUE INDEX attempts_one_live ON attempts (run_id) WHERE state IN ('queued', 'leased');
CREATE INDEX attempts_claim ON attempts (tenant, pool, not_before, id) WHERE state = 'queued';
CREATE INDEX attempts_lease_expiry ON attempts (lease_expires_at) WHERE state = 'leased';
CREATE INDEX attempts_claim_request ON attempts (runner_id, claim_request_id);

CREATE TABLE runners (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    pool            TEXT NOT NULL,
    name            TEXT NOT NULL,
    labels          TEXT NOT NULL DEFAULT '[]',
    public_key      TEXT NOT NULL,
    key_fingerprint TEXT NOT NULL,
    status          TEXT NOT NULL,
    self_hosted     INTEGER NOT NULL DEFAULT 0,
    allowed_repos   TEXT NOT NULL DEFAULT '[]',
    version         TEXT NOT NULL,
    last_seen_at    INTEGER,
    created_at      INTEGER NOT NULL
);
CREATE INDEX runners_tenant ON runners (tenant, id);

CREATE TABLE reg_tokens (
    digest        TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    pool          TEXT NOT NULL,
    labels        TEXT NOT NULL DEFAULT '[]',
    allowed_repos TEXT NOT NULL DEFAULT '[]',
    self_hosted   INTEGER NOT NULL DEFAULT 0,
    expires_at    INTEGER NOT NULL,
    used_at       INTEGER,
    created_at    INTEGER NOT NULL
);

CREATE TABLE nonces (
    runner_id  TEXT NOT NULL,
    nonce      TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (runner_id, nonce)
);
CREATE INDEX nonces_expires_at ON nonces (expires_at);

CREATE TABLE log_lines (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id     TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    idx        INTEGER NOT NULL,
    at         INTEGER NOT NULL,
    stream     TEXT NOT NULL,
    text       TEXT NOT NULL,
    UNIQUE (attempt_id, seq, idx)
);
CREATE INDEX log_lines_run ON log_lines (run_id, id);

CREATE TABLE audit_events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant  TEXT NOT NULL,
    at      INTEGER NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    subject TEXT NOT NULL,
    details TEXT
);
CREATE INDEX audit_events_tenant ON audit_events (tenant, seq);
CREATE INDEX audit_events_subject ON audit_events (tenant, subject, seq);
