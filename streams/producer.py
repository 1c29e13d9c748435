"""Faust's producer, made idempotent.

faust-streaming turns on `enable_idempotence` only inside exactly-once transactions, so a broker
retry of a produce request (a lost acknowledgement, a leader change) can write a record twice:
a changelog record, a schedule's state, a command. With idempotence the broker drops the
retried batch by its producer id and sequence number. Records still carry deterministic ids
(`command_id`, `event_id`), so the duplicates a replay after a crash produces stay harmless.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.transport.drivers.aiokafka import Producer


class IdempotentProducer(Producer):
    """Faust's aiokafka producer with acks=all and enable_idempotence on every record."""

    def _settings_extra(self) -> Mapping[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


def make_idempotent(app: Any) -> None:
    """Use `IdempotentProducer` for `app`; call before anything starts the producer."""
    app.transport.Producer = IdempotentProducer
