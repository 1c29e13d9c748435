-- /status reports how late the newest commands went out (issued_at - due_at); this index lets
-- it read the newest commands of the last hour without scanning the whole command history.
CREATE INDEX IF NOT EXISTS scan_commands_issued ON scan_commands (issued_at DESC);
