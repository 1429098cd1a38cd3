-- Heap-only run updates (docs/benchmarks.md, "Session 13").
--
-- PostgreSQL updates a row in place on its page, without a new entry in
-- every index ("heap-only", HOT), only when no column an index covers or
-- filters on changes. Two partial indexes filtered on runs.state, so each
-- of a run's state changes (queued, running, succeeded) wrote a new entry
-- into runs_pkey, runs_tenant_id and runs_idempotency and put the new row
-- version on whatever page had room. They now filter on generated columns
-- that keep their value (NULL) through the changes of a run that neither
-- waits for approval nor holds lease keys: most runs.
ALTER TABLE runs
    ADD COLUMN pending_since timestamptz
        GENERATED ALWAYS AS (CASE WHEN state = 'pending_approval' THEN created_at END) STORED,
    ADD COLUMN live_lease_keys jsonb
        GENERATED ALWAYS AS (CASE WHEN state IN ('pending_approval', 'queued', 'running') AND lease_keys <> '[]'::jsonb
            THEN lease_keys END) STORED;

DROP INDEX runs_pending_approval;
CREATE INDEX runs_pending_approval ON runs (pending_since) WHERE pending_since IS NOT NULL;

DROP INDEX runs_live_lease_keys;
CREATE INDEX runs_live_lease_keys ON runs USING gin (live_lease_keys jsonb_path_ops) WHERE live_lease_keys IS NOT NULL;

-- Room on each page for a run's next versions: an update can stay on its
-- page only if the page has space for the new version.
ALTER TABLE runs SET (fillfactor = 50);

