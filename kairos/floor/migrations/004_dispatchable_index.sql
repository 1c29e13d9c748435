-- Serves "overdue" and "due soon" counts even when most of the fleet is overdue.
CREATE INDEX IF NOT EXISTS host_schedule_dispatchable
    ON host_schedule (next_scheduled_scan)
    WHERE NOT maintenance_mode AND NOT deleted AND is_active AND status = 'up'
      AND in_flight_command_id IS NULL;
