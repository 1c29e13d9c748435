-- Counters the projector keeps current in the same transaction as the rows they count,
-- so GET /status never counts a million rows.
CREATE TABLE IF NOT EXISTS host_state_counts (
    state  text PRIMARY KEY,
    hosts  bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS host_flag_counts (
    flag   text PRIMARY KEY,   -- 'in_flight', 'maintenance', 'inactive', 'down'
    hosts  bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS host_schedule_org ON host_schedule (organization) WHERE NOT deleted;
CREATE INDEX IF NOT EXISTS host_schedule_in_flight
    ON host_schedule (in_flight_command_id) WHERE in_flight_command_id IS NOT NULL;
