-- Run leases: a fencing counter and "once" bookkeeping per key, one row per
-- hold (a slot of a semaphore), and the key a queued attempt waits for.

CREATE TABLE lease_keys (
    tenant             TEXT NOT NULL,
    key                TEXT NOT NULL,
    last_fencing_token INTEGER NOT NULL DEFAULT 0,
    consumed_by_run    TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, key)
);

CREATE TABLE leases (
    tenant        TEXT NOT NULL,
    key           TEXT NOT NULL,
    slot          INTEGER NOT NULL,
    run_id        TEXT NOT NULL,
    attempt_id    TEXT NOT NULL REFERENCES attempts (id),
    fencing_token INTEGER NOT NULL,
    acquired_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant, key, slot)
);
CREATE INDEX leases_attempt ON leases (attempt_id);

ALTER TABLE attempts ADD COLUMN blocked_on TEXT NOT NULL DEFAULT '';
-- Blocked attempts are not claimable: they leave the claim index.
DROP INDEX attempts_claim;
CREATE INDEX attempts_claimable ON attempts (tenant, pool, not_before, id) WHERE state = 'queued' AND blocked_on = '';
CREATE INDEX attempts_blocked ON attempts (tenant, blocked_on, not_before, id) WHERE state = 'queued' AND blocked_on <> '';

-- LeaseLiveRun scans a tenant's unfinished runs.
CREATE INDEX runs_live ON runs (tenant, id) WHERE state IN ('pending_approval', 'queued', 'running');
