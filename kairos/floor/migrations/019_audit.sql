-- Who changed what, and when: one row per change. Changes published on `schedule-changes` and
-- `object-created` are recorded by the projector (event_id = the change's event id); token
-- creation and revocation, and dead-letter redrives, by the API in the transaction that makes
-- them. `subject_kind` is host, schedule, config, scanner, token or dead_letter.
CREATE TABLE IF NOT EXISTS audit (
    event_id     uuid PRIMARY KEY,
    at           timestamptz NOT NULL,
    actor        text,
    type         text NOT NULL,
    subject_kind text NOT NULL,
    subject_id   text NOT NULL,
    summary      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS audit_at ON audit (at DESC, event_id DESC);
CREATE INDEX IF NOT EXISTS audit_subject ON audit (subject_kind, subject_id, at DESC);
CREATE INDEX IF NOT EXISTS audit_actor ON audit (actor, at DESC);

-- A dead letter sent again to its source topic: by whom, when, and the id of the new event.
-- The latest redrive is what refuses a second one unless forced.
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS redriven_at timestamptz;
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS redriven_by text;
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS redrive_event_id text;
