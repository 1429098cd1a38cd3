-- The three largest JSON documents the hot path writes are stored as json
-- (the text, checked to be JSON) instead of jsonb (parsed into a binary
-- tree at every write, printed back at every read): a run's decision record
-- (about 1 kB, written at the request and again at the claim), its pinned
-- spec (written at the request) and an audit event's details (three events
-- per run). No statement looks inside any of them; stored as json they
-- cost PostgreSQL 4 to 10 % less CPU per run (docs/benchmarks.md,
-- "Session 19").
--
-- The rows are rewritten once, here: each value keeps jsonb's spelling of
-- it. The audit chain does not depend on the spelling (its encoding is
-- canonical, docs/operations.md "Audit"), so sealed events still verify.
ALTER TABLE runs
    ALTER COLUMN decision TYPE json USING decision::json,
    ALTER COLUMN spec TYPE json USING spec::json;
ALTER TABLE audit_events ALTER COLUMN details TYPE json USING details::json;
