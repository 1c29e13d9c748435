"""The Kairos HTTP API: reads from the PostgreSQL read model, writes as events."""
