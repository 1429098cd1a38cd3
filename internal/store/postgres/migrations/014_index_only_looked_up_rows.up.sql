-- Two indexes held an entry for every row version, though their one query
-- never looks up most of them (docs/benchmarks.md, "Session 10"):
--
-- runs_live_lease_keys had an empty-item entry for each live run without
-- lease keys (most runs, twice each: queued, then running). LeaseLiveRun
-- looks up a key, which only a run with keys can hold.
DROP INDEX runs_live_lease_keys;
CREATE INDEX runs_live_lease_keys ON runs USING gin (lease_keys jsonb_path_ops)
    WHERE state IN ('pending_approval', 'queued', 'running') AND lease_keys <> '[]'::jsonb;

-- attempts_claim_request had an entry ('', '') for every queued attempt.
-- AttemptGetByClaimRequest looks up a claim's non-empty request ID.
DROP INDEX attempts_claim_request;
CREATE INDEX attempts_claim_request ON attempts (runner_id, claim_request_id) WHERE claim_request_id <> '';
