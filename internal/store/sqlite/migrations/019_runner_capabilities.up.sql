-- Executors (docs/executors.md): a runner states which executor it runs
-- and what that executor can do (a bit set: 1 runs images, 2 keeps jobs
-- away from the runner's key); an attempt carries what its runner must be
-- able to do (the same bits), checked at claim. Rows of runners that never
-- said are the process executor without isolation.
ALTER TABLE runners ADD COLUMN executor TEXT NOT NULL DEFAULT 'process';
ALTER TABLE runners ADD COLUMN capabilities INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN needs INTEGER NOT NULL DEFAULT 0;
