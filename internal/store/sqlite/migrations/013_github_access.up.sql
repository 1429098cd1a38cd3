-- When an installation loses a repository (or is deleted), the runs of that
-- repository still open are found through their Check Runs.
CREATE INDEX github_check_runs_installation ON github_check_runs (installation_id, repo);
