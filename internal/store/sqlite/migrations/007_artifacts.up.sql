-- Artifacts (docs/artifacts.md): one row per upload capability; a refused
-- upload deletes its row, so only pending, uploading and stored rows exist.
-- An attempt stores at most one artifact of a name.

CREATE TABLE artifacts (
    id                TEXT PRIMARY KEY,
    tenant            TEXT NOT NULL,
    run_id            TEXT NOT NULL,
    attempt_id        TEXT NOT NULL,
    name              TEXT NOT NULL,
    role              TEXT NOT NULL,
    max_bytes         INTEGER NOT NULL,
    expected_size     INTEGER NOT NULL,
    expected_sha256   TEXT NOT NULL,
    capability_digest TEXT NOT NULL UNIQUE,
    lease_digest      TEXT NOT NULL,
    storage_key       TEXT NOT NULL,
    state             TEXT NOT NULL,
    size              INTEGER NOT NULL,
    sha256            TEXT NOT NULL,
    expires_at        INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    stored_at         INTEGER
);
CREATE UNIQUE INDEX artifacts_stored_name ON artifacts (attempt_id, name) WHERE state = 'stored';
CREATE INDEX artifacts_run ON artifacts (run_id);

-- Source tickets (docs/artifacts.md): single use, short-lived, bound to one
-- attempt lease; only the digest of a ticket is kept.
CREATE TABLE source_tickets (
    digest       TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    attempt_id   TEXT NOT NULL,
    lease_digest TEXT NOT NULL,
    repo         TEXT NOT NULL,
    commit_sha   TEXT NOT NULL,
    expires_at   INTEGER NOT NULL,
    used_at      INTEGER,
    created_at   INTEGER NOT NULL
);
