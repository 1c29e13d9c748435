-- Serves /status "due in the next hour" by an index-only range count. The dispatchable
-- index (004) leaves hosts in flight out, and this count includes them.
CREATE INDEX IF NOT EXISTS host_schedule_scannable
    ON host_schedule (next_scheduled_scan)
    WHERE NOT maintenance_mode AND NOT deleted AND is_active AND status = 'up';
