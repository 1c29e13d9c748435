-- The read model: projected from the worker's events, read by the API.
CREATE TABLE IF NOT EXISTS host_schedule (
    host_id                   text PRIMARY KEY,
    state                     text NOT NULL,
    compliance_state          text NOT NULL,
    score                     double precision,
    current_interval_minutes  integer NOT NULL,
    next_scheduled_scan       timestamptz NOT NULL,
    last_scan_completed       timestamptz,
    last_scan_id              text,
    last_error                text,
    maintenance_mode          boolean NOT NULL DEFAULT false,
    maintenance_until         timestamptz,
    scan_priority             integer NOT NULL,
    consecutive_scan_failures integer NOT NULL DEFAULT 0,
    in_flight_command_id      text,
    is_active                 boolean NOT NULL DEFAULT true,
    status                    text NOT NULL DEFAULT 'up',
    hostname                  text,
    organization              text,
    attributes                jsonb NOT NULL DEFAULT '{}'::jsonb,
    labels                    jsonb NOT NULL DEFAULT '{}'::jsonb,
    version                   bigint NOT NULL,
    deleted                   boolean NOT NULL DEFAULT false,
    created_at                timestamptz NOT NULL,
    updated_at                timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS host_schedule_due
    ON host_schedule (next_scheduled_scan) WHERE NOT maintenance_mode AND NOT deleted;
CREATE INDEX IF NOT EXISTS host_schedule_dispatch_order
    ON host_schedule (scan_priority DESC, next_scheduled_scan ASC) WHERE NOT deleted;
CREATE INDEX IF NOT EXISTS host_schedule_state ON host_schedule (state) WHERE NOT deleted;
CREATE INDEX IF NOT EXISTS host_schedule_labels ON host_schedule USING gin (labels);

CREATE TABLE IF NOT EXISTS scheduler_config (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    config      jsonb NOT NULL,
    version     bigint NOT NULL,
    updated_at  timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS scan_results (
    event_id                 uuid PRIMARY KEY,
    command_id               text NOT NULL,
    host_id                  text NOT NULL,
    scanner                  text NOT NULL,
    status                   text NOT NULL,
    started_at               timestamptz,
    completed_at             timestamptz NOT NULL,
    score                    double precision,
    passed                   integer NOT NULL,
    failed                   integer NOT NULL,
    severity_critical_failed integer NOT NULL,
    severity_high_failed     integer NOT NULL,
    severity_medium_failed   integer NOT NULL,
    severity_low_failed      integer NOT NULL,
    scan_id                  text,
    error                    text
);
CREATE INDEX IF NOT EXISTS scan_results_host ON scan_results (host_id, completed_at DESC);

CREATE TABLE IF NOT EXISTS scan_commands (
    command_id  text PRIMARY KEY,
    host_id     text NOT NULL,
    scanner     text NOT NULL,
    priority    integer NOT NULL,
    reason      text NOT NULL,
    state       text NOT NULL,
    due_at      timestamptz NOT NULL,
    issued_at   timestamptz NOT NULL,
    deadline    timestamptz NOT NULL,
    attempt     integer NOT NULL,
    schedule_id text,
    outcome     text,
    outcome_at  timestamptz
);
CREATE INDEX IF NOT EXISTS scan_commands_host ON scan_commands (host_id, issued_at DESC);

CREATE TABLE IF NOT EXISTS dead_letters (
    event_id     uuid PRIMARY KEY,
    source_topic text NOT NULL,
    partition    integer,
    "offset"     bigint,
    key          text,
    error        text NOT NULL,
    raw          text NOT NULL,
    received_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_received ON dead_letters (received_at DESC);

CREATE TABLE IF NOT EXISTS api_tokens (
    token_hash  text PRIMARY KEY,
    name        text NOT NULL,
    role        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE TABLE IF NOT EXISTS projection_progress (
    source          text PRIMARY KEY,
    newest_event_at timestamptz,
    applied_at      timestamptz NOT NULL
);
