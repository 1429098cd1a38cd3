-- Run leases: a fencing counter and "once" bookkeeping per key, one row per
-- hold (a slot of a semaphore), and the key a queued attempt waits for.
-- Keys are COLLATE "C": listed in byte order as on SQLite, whatever the
-- database's locale.

CREATE TABLE lease_keys (
    tenant             text NOT NULL,
    key                text COLLATE "C" NOT NULL,
    last_fencing_token bigint NOT NULL DEFAULT 0,
    consumed_by_run    text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, key)
);

CREATE TABLE leases (
    tenant        text NOT NULL,
    key           text COLLATE "C" NOT NULL,
    slot          integer NOT NULL,
    run_id        text NOT NULL,
    attempt_id    text NOT NULL REFERENCES attempts (id),
    fencing_token bigint NOT NULL,
    acquired_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, key, slot)
);
CREATE INDEX leases_attempt ON leases (attempt_id);

ALTER TABLE attempts ADD COLUMN blocked_on text NOT NULL DEFAULT '';
-- Blocked attempts are not claimable: they leave the claim index.
DROP INDEX attempts_claim;
CREATE INDEX attempts_claimable ON attempts (tenant, pool, not_before, id) WHERE state = 'queued' AND blocked_on = '';
CREATE INDEX attempts_blocked ON attempts (tenant, blocked_on, not_before, id) WHERE state = 'queued' AND blocked_on <> '';

-- LeaseLiveRun: unfinished runs whose lease_keys contain {"key": ...}.
CREATE INDEX runs_live_lease_keys ON runs USING gin (lease_keys jsonb_path_ops)
    WHERE state IN ('pending_approval', 'queued', 'running');
