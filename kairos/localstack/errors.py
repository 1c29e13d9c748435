"""The single exception type raised by the local infrastructure helpers."""

from __future__ import annotations


class LocalStackError(RuntimeError):
    """A local service (Kafka, Tansu, PostgreSQL) could not be provisioned, started or stopped.

    The message is one sentence saying what failed, optionally followed by the
    tail of the relevant log or tool output.
    """
