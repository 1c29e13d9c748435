-- A result whose command_id names no command Kairos issued is "unmatched": shown as such in
-- history, never as the host's latest scan, and counted in /status. The projector sets the
-- flag when it stores a result and clears it when the command arrives (results and commands
-- travel on different topics, so a result may be projected first).
ALTER TABLE scan_results ADD COLUMN IF NOT EXISTS matched boolean NOT NULL DEFAULT true;
UPDATE scan_results r SET matched = false
    WHERE NOT EXISTS (SELECT 1 FROM scan_commands c WHERE c.command_id = r.command_id);
CREATE INDEX IF NOT EXISTS scan_results_unmatched ON scan_results (completed_at) WHERE NOT matched;
