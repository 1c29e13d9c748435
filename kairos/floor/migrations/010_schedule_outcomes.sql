-- Generic schedules: run outcomes that follow the commands, dropped occurrences, incarnations.
-- A schedule deleted and created again under the same name is a new incarnation (the id of
-- the event that created it); its runs are keyed by it, so the new one starts with no history.
ALTER TABLE schedules
    ADD COLUMN IF NOT EXISTS incarnation text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS succeeded_runs integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS partially_failed_runs integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS dropped_occurrences jsonb NOT NULL DEFAULT '{}';

DROP INDEX IF EXISTS schedule_runs_recent;
ALTER TABLE schedule_runs
    ADD COLUMN IF NOT EXISTS incarnation text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS commands_succeeded integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS commands_failed integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS skip_reason text,
    ADD COLUMN IF NOT EXISTS skipped_hosts jsonb NOT NULL DEFAULT '{}',
    DROP CONSTRAINT IF EXISTS schedule_runs_outcome_check,
    ADD CONSTRAINT schedule_runs_outcome_check CHECK (
        outcome IN ('fired', 'skipped', 'succeeded', 'partially_failed', 'failed', 'dropped')
    ),
    DROP CONSTRAINT IF EXISTS schedule_runs_pkey,
    ADD PRIMARY KEY (schedule_id, incarnation, occurrence, attempt);
CREATE INDEX IF NOT EXISTS schedule_runs_recent
    ON schedule_runs (schedule_id, incarnation, fired_at DESC);
