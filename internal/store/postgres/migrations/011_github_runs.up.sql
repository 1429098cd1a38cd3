-- GitHub runs (docs/github.md): an attempt carries the repository it builds
-- ('' when none), which a runner's allow-list is checked against at claim,
-- and whether it may only go to a managed runner (safe mode: a pull request
-- from a fork).
ALTER TABLE attempts ADD COLUMN repo text NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN managed_only boolean NOT NULL DEFAULT false;
