ALTER TABLE projection_progress ADD COLUMN IF NOT EXISTS consumer_lag bigint NOT NULL DEFAULT 0;
ALTER TABLE projection_progress ADD COLUMN IF NOT EXISTS lag_seconds double precision NOT NULL DEFAULT 0;
