-- Generic schedules (projected from kairos-schedules) and the history of their runs.
CREATE TABLE IF NOT EXISTS schedules (
    schedule_id           text PRIMARY KEY,
    name                  text NOT NULL,
    definition            jsonb NOT NULL,
    status                text NOT NULL,
    enabled               boolean NOT NULL,
    paused                boolean NOT NULL DEFAULT false,
    pause_note            text,
    disabled_reason       text,
    is_system             boolean NOT NULL DEFAULT false,
    next_fire_at          timestamptz,
    last_fired_at         timestamptz,
    last_success_at       timestamptz,
    runs                  integer NOT NULL DEFAULT 0,
    skipped_runs          integer NOT NULL DEFAULT 0,
    failed_runs           integer NOT NULL DEFAULT 0,
    consecutive_failures  integer NOT NULL DEFAULT 0,
    last_error            text,
    version               bigint NOT NULL,
    deleted               boolean NOT NULL DEFAULT false,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL
);
-- Names are unique among live schedules; the API uses the name as the schedule id.
CREATE UNIQUE INDEX IF NOT EXISTS schedules_name_unique ON schedules (name) WHERE NOT deleted;

CREATE TABLE IF NOT EXISTS schedule_runs (
    schedule_id      text NOT NULL,
    occurrence       timestamptz NOT NULL,
    attempt          integer NOT NULL,
    reason           text NOT NULL,
    fired_at         timestamptz NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('fired', 'skipped', 'failed')),
    error            text,
    hosts_matched    integer NOT NULL DEFAULT 0,
    commands_issued  integer NOT NULL DEFAULT 0,
    PRIMARY KEY (schedule_id, occurrence, attempt)
);
CREATE INDEX IF NOT EXISTS schedule_runs_recent ON schedule_runs (schedule_id, fired_at DESC);
