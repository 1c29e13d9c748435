-- Tokens may carry an expiry (`kairos token create --ttl 30d`); NULL never expires, as every
-- token made before this column existed.
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS expires_at timestamptz;
