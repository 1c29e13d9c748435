"""Every topic and table the worker uses, specified once: `streams.admin` creates the topics
(partitions, compaction) from here and the worker declares its Faust tables from here. The
worker's Faust topic handles (`streams.app`) are opened on the same names, from
`settings.topics`; the two single-partition topics say their one partition there again.

Topic names come from the contract (`schemas.topics`); this module adds what the contract does
not say: partition counts, compaction, and the Faust tables with their changelog topics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kairos.floor.settings import Settings


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    compacted: bool = False


@dataclass(frozen=True)
class TableSpec:
    """A Faust table: str keys, raw bytes values (Kairos encodes them itself)."""

    name: str
    single_partition: bool = False
    """The dispatcher's table is one partition: the global cap lives in one place."""

    def partitions(self, settings: Settings) -> int:
        return 1 if self.single_partition else settings.partitions

    def changelog(self, settings: Settings) -> str:
        return f"{settings.topic_prefix}{settings.app_id}-{self.name}-changelog"

    def declare(self, app: Any, settings: Settings) -> Any:
        return app.Table(
            self.name, partitions=self.partitions(settings), key_type=str, value_type=bytes
        )


HOSTS = TableSpec("hosts")
"""host id -> HostSchedule, the host stage's state."""
DISPATCHER = TableSpec("dispatcher", single_partition=True)
"""The dispatcher's slots and waiting requests (the global in-flight cap)."""
SCHEDULES = TableSpec("schedules")
"""schedule id -> ScheduleState, on the schedule's own partition."""
SCHEDULE_FANOUTS = TableSpec("schedule-fanouts")
"""A run's fan-out accounting: which partitions answered, on the schedule's partition."""
SCHEDULE_COMMANDS = TableSpec("schedule-commands")
"""Host side of a schedule's commands: command id -> entry, busy and last-scan markers."""

TABLES = (HOSTS, DISPATCHER, SCHEDULES, SCHEDULE_FANOUTS, SCHEDULE_COMMANDS)


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """Every topic Kairos needs, with its partition count and cleanup policy."""
    names = settings.topics
    compacted = {names.schedules}  # Latest state per key is all that counts.
    host_keyed = [
        TopicSpec(name, settings.partitions, compacted=name in compacted)
        for name in names.host_keyed()
    ]
    return [
        *host_keyed,
        TopicSpec(names.dead_letters, settings.partitions),
        TopicSpec(names.alerts, settings.partitions),
        TopicSpec(names.dispatch_queue, 1),
        TopicSpec(names.scheduler_control, 1, compacted=False),
        *faust_topic_specs(settings),
    ]


def faust_topic_specs(settings: Settings) -> list[TopicSpec]:
    """Faust's own topics, created up front.

    Left to Faust, a consumer can record a changelog topic before Faust has created it and
    keep that empty view for minutes; its agent then crashes with PartitionsMismatch on
    every message. Creating them with the rest avoids the race on a fresh deployment.
    """
    specs = [
        TopicSpec(table.changelog(settings), table.partitions(settings), compacted=True)
        for table in TABLES
    ]
    specs.append(TopicSpec(f"{settings.topic_prefix}{settings.app_id}-__assignor-__leader", 1))
    return specs
