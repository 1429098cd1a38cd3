-- Artifacts (docs/artifacts.md): one row per upload capability; a refused
-- upload deletes its row, so only pending, uploading and stored rows exist.
-- An attempt stores at most one artifact of a name.

CREATE TABLE artifacts (
    id                text PRIMARY KEY,
    tenant            text NOT NULL,
    run_id            text NOT NULL,
    attempt_id        text NOT NULL,
    name              text NOT NULL,
    role              text NOT NULL,
    max_bytes         bigint NOT NULL,
    expected_size     bigint NOT NULL,
    expected_sha256   text NOT NULL,
    capability_digest text NOT NULL UNIQUE,
    lease_digest      text NOT NULL,
    storage_key       text NOT NULL,
    state             text NOT NULL,
    size              bigint NOT NULL,
    sha256            text NOT NULL,
    expires_at        timestamptz NOT NULL,
    created_at        timestamptz NOT NULL,
    stored_at         timestamptz
);
CREATE UNIQUE INDEX artifacts_stored_name ON artifacts (attempt_id, name) WHERE state = 'stored';
CREATE INDEX artifacts_run ON artifacts (run_id);

-- Source tickets (docs/artifacts.md): single use, short-lived, bound to one
-- attempt lease; only the digest of a ticket is kept.
CREATE TABLE source_tickets (
    digest       text PRIMARY KEY,
    tenant       text NOT NULL,
    run_id       text NOT NULL,
    attempt_id   text NOT NULL,
    lease_digest text NOT NULL,
    repo         text NOT NULL,
    commit_sha   text NOT NULL,
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz,
    created_at   timestamptz NOT NULL
);
