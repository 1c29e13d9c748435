"""The projection: the worker's events, written into the PostgreSQL read model."""
