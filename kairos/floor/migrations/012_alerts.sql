-- Alerts: one row per alert, raised and later resolved. At most one open alert per type and
-- subject (the partial unique index is what deduplicates). `revision` counts the alert's
-- changes (1 raised, 2 resolved); rows whose published_revision lags are still to be
-- published on the alerts topic.
CREATE TABLE IF NOT EXISTS alerts (
    alert_id uuid PRIMARY KEY,
    alert_type text NOT NULL,
    subject_type text NOT NULL,
    subject_id text NOT NULL,
    severity text NOT NULL,
    summary text NOT NULL,
    details jsonb NOT NULL DEFAULT '{}',
    raised_at timestamptz NOT NULL,
    resolved_at timestamptz,
    resolution text,
    revision integer NOT NULL DEFAULT 1,
    published_revision integer NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS alerts_open ON alerts (alert_type, subject_id)
    WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS alerts_raised ON alerts (raised_at DESC, alert_id DESC);
CREATE INDEX IF NOT EXISTS alerts_unpublished ON alerts (raised_at)
    WHERE published_revision < revision;

-- Time-based conditions the periodic check keeps between runs (cap saturated since when).
CREATE TABLE IF NOT EXISTS alert_watches (
    name text PRIMARY KEY,
    since timestamptz
);
