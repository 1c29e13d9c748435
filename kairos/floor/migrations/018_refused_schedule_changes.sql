-- A schedule's refused changes (a stale If-Match, a create of a name that exists) are dead
-- letters keyed by the schedule id: the API reads them by key, newest first.
CREATE INDEX IF NOT EXISTS dead_letters_key ON dead_letters (key, received_at DESC);
