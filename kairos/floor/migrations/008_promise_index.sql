-- Serves /status "past_promise": active hosts outside maintenance whose last successful scan
-- (or creation) is older than the ceiling, by a range count on this expression.
CREATE INDEX IF NOT EXISTS host_schedule_promise
    ON host_schedule ((COALESCE(last_scan_completed, created_at)))
    WHERE NOT maintenance_mode AND NOT deleted AND is_active;
