-- Which event store (Kafka cluster) the read model projects. When a process finds another
-- cluster behind the same database, the projected tables are cleared and rebuilt from it.
CREATE TABLE IF NOT EXISTS event_store (
    singleton          boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    cluster_id         text NOT NULL,
    bootstrap_servers  text NOT NULL,
    bound_at           timestamptz NOT NULL DEFAULT now()
);
