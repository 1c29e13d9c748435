-- GET /commands lists commands across the fleet, filtered by scanner, schedule, run, state and
-- time. `occurrence` is the schedule occurrence (run) a schedule's command was issued for; the
-- projector finds it from the command id, which the occurrence keys. It stays null for the
-- adaptive scheduler's commands, for a backfilled run's (their ids carry the backfill request)
-- and for commands projected before this migration.
ALTER TABLE scan_commands ADD COLUMN IF NOT EXISTS occurrence timestamptz;
CREATE INDEX IF NOT EXISTS scan_commands_scanner ON scan_commands (scanner, issued_at DESC);
CREATE INDEX IF NOT EXISTS scan_commands_schedule
    ON scan_commands (schedule_id, occurrence, issued_at DESC) WHERE schedule_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS scan_commands_in_flight
    ON scan_commands (issued_at DESC) WHERE outcome IS NULL;
CREATE INDEX IF NOT EXISTS scan_commands_outcome
    ON scan_commands (outcome, issued_at DESC) WHERE outcome IS NOT NULL;
-- Schedule commands still looking for their run: the run's record may be projected after them.
CREATE INDEX IF NOT EXISTS scan_commands_unlinked
    ON scan_commands (schedule_id, attempt) WHERE schedule_id IS NOT NULL AND occurrence IS NULL;
