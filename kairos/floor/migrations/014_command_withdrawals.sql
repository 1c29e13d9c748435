-- Claims withdrawn before they were issued (the host entered maintenance, went down or
-- inactive while its claim waited for a slot): a host's history shows each one.
CREATE TABLE IF NOT EXISTS command_withdrawals (
    command_id text PRIMARY KEY,
    host_id text NOT NULL,
    reason text NOT NULL,
    withdrawn_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS command_withdrawals_host
    ON command_withdrawals (host_id, withdrawn_at DESC);

-- Hosts holding a claim, for /status's count of claims still waiting for a slot.
CREATE INDEX IF NOT EXISTS host_schedule_claimed
    ON host_schedule (in_flight_command_id) WHERE in_flight_command_id IS NOT NULL;
