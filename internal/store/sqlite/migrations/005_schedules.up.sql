-- Schedules: per job and channel, the next fire time to claim and the last
-- window fired (docs/schedules.md). Replicas claim a fire time with a
-- conditional UPDATE on next_fire_at.

CREATE TABLE schedules (
    tenant       TEXT NOT NULL,
    channel      TEXT NOT NULL,
    job          TEXT NOT NULL,
    cron         TEXT NOT NULL,
    tz           TEXT NOT NULL,
    commit_sha   TEXT NOT NULL,
    next_fire_at INTEGER NOT NULL,
    last_window  INTEGER,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant, channel, job)
);
