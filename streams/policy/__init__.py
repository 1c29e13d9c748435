"""Scheduling policy: pure functions over plain data. No Kafka, no SQL, no clock reads."""
