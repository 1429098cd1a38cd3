-- Schedules: per job and channel, the next fire time to claim and the last
-- window fired (docs/schedules.md). Replicas claim a fire time with a
-- conditional UPDATE on next_fire_at.

CREATE TABLE schedules (
    tenant       text NOT NULL,
    channel      text COLLATE "C" NOT NULL,
    job          text COLLATE "C" NOT NULL,
    cron         text NOT NULL,
    tz           text NOT NULL,
    commit_sha   text NOT NULL,
    next_fire_at timestamptz NOT NULL,
    last_window  timestamptz,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, channel, job)
);
