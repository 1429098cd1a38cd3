-- What the server decided about each commit of each channel's branch: the
-- active commit (the last good catalog, read back at start), rejected
-- commits with their errors, and commits that were active before.

CREATE TABLE catalogs (
    tenant       TEXT NOT NULL,
    channel      TEXT NOT NULL,
    branch       TEXT NOT NULL,
    commit_sha   TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('active', 'rejected', 'superseded')),
    errors       TEXT,
    author       TEXT NOT NULL,
    committed_at INTEGER NOT NULL,
    loaded_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, channel, branch, commit_sha)
);
CREATE INDEX catalogs_by_status ON catalogs (tenant, status, loaded_at);
