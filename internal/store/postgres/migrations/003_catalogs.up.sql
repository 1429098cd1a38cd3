-- What the server decided about each commit of each channel's branch: the
-- active commit (the last good catalog, read back at start), rejected
-- commits with their errors, and commits that were active before.

CREATE TABLE catalogs (
    tenant       text NOT NULL,
    channel      text NOT NULL,
    branch       text NOT NULL,
    commit_sha   text NOT NULL,
    status       text NOT NULL CHECK (status IN ('active', 'rejected', 'superseded')),
    errors       jsonb,
    author       text NOT NULL,
    committed_at timestamptz NOT NULL,
    loaded_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, channel, branch, commit_sha)
);
CREATE INDEX catalogs_by_status ON catalogs (tenant, status, loaded_at);
