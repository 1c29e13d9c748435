"""The trigger follower: every worker reads kairos-schedules whole to know every schedule
with a trigger, and hands each object event to the trigger schedules it matches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.internal import ScheduleObjectEvent
from schemas.objects import ObjectEvent
from schemas.schedules import Schedule, ScheduleStateChanged
from streams import codec
from streams.codec import Undecodable
from streams.policy.schedules import trigger_matches
from streams.stages.schedules.tables import ScheduleTables

_TRIGGER_SET = b'"trigger":{'
"""How a schedule with a trigger reads in a `ScheduleStateChanged` (pydantic's compact JSON)."""


def may_change_triggers(key: bytes | None, raw: bytes | None, triggers: Mapping[str, Any]) -> bool:
    """Whether a kairos-schedules record must be decoded to keep the trigger index true.

    Most records concern schedules without a trigger, known to have none: they are passed
    over undecoded (every worker reads the whole topic, and decoding every record would be
    work in each due pass for nothing). Every quote inside a JSON string is escaped, so
    `_TRIGGER_SET` only ever matches a key: a schedule with a trigger always holds it, and a
    key of that name in `args` only costs a decode.
    """
    if raw is None or key is None or _TRIGGER_SET in raw:
        return True
    return key.decode("utf-8", "replace") in triggers


class TriggerFollower:
    def __init__(self, tables: ScheduleTables) -> None:
        self.tables = tables
        self.triggers: dict[str, Schedule] = {}

    async def follow(self) -> None:
        """Read kairos-schedules whole: every worker knows every trigger schedule."""
        worker = self.tables.worker
        consumer = AIOKafkaConsumer(
            **worker.settings.kafka_client_options(), enable_auto_commit=False, group_id=None
        )
        await consumer.start()
        try:
            topic = worker.names.schedules
            assigned = [TopicPartition(topic, p) for p in range(self.tables.partitions)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            while True:
                batches = await consumer.getmany(*assigned, timeout_ms=500)
                for records in batches.values():
                    for record in records:
                        self.on_record(record.key, record.value)
        finally:
            await consumer.stop()

    def on_record(self, key: bytes | None, raw: bytes | None) -> None:
        if not may_change_triggers(key, raw, self.triggers):
            return
        try:
            record: ScheduleStateChanged = codec.decode(codec.schedule_state_changed, raw)
        except Undecodable:
            return
        state = record.state
        if state is None or state.schedule.trigger is None:
            self.triggers.pop(record.schedule_id, None)
        else:
            self.triggers[record.schedule_id] = state.schedule

    async def route(self, event: ObjectEvent) -> None:
        """Hand an object event to every trigger schedule it matches (keyed by schedule id)."""
        for schedule in list(self.triggers.values()):
            if trigger_matches(schedule, event):
                message = ScheduleObjectEvent(schedule_id=schedule.id, event=event)
                await self.tables.signal(schedule.id, message)
