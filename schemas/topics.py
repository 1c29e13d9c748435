"""Every topic name Kairos uses; `TopicNames` prepends the deployment's KAIROS_TOPIC_PREFIX.

The first six are the contract other systems read or write. The `kairos-*` ones are Kairos'
own, between its stages and from the worker to the projector. Partition counts and compaction
are not part of a name: `streams.topology` declares them.
"""

from __future__ import annotations

from dataclasses import dataclass

OBJECT_CREATED = "object-created"
SCHEDULE_CHANGES = "schedule-changes"
SCAN_COMPLETED = "scan-completed"
SCAN_COMMANDS = "scan-commands"
DEAD_LETTERS = "dead-letters"
ALERTS = "alerts"

# Kairos' own topics. Their messages: schemas.internal (host and schedule signals, dispatch
# queue, control), schemas.schedules (schedules and schedule runs). Each host's state is read
# from the worker's hosts table's changelog (`streams.topology.HOSTS`): key the host id as
# JSON, value the `schemas.state.HostSchedule` as the table keeps it (under its short keys,
# its fields at their defaults left out: read it with the model, which takes both and gives
# the defaults back), a tombstone once the host is deleted.
HOST_SIGNALS = "kairos-host-signals"
DISPATCH_QUEUE = "kairos-dispatch-queue"
SCHEDULER_CONTROL = "kairos-scheduler-control"
SCHEDULES = "kairos-schedules"
"""Generic schedules' state, compacted, key = schedule id (read whole by every worker); the
state as the worker's table keeps it, without its null fields."""
SCHEDULE_RUNS = "kairos-schedule-runs"
"""Schedule run records, key = schedule id; kept by time, not compacted.

One per run (fired or skipped, then how it ended) and one per dropped occurrence."""

CONFIG_KEY = "config"
"""Key of schedule-changes messages that concern the global scheduler config."""

ACTOR_HEADER = "kairos-actor"
"""Record header naming who asked for an `object-created` event (the API sets it to the
caller's token name); the event's contract has no field for it. Optional."""


@dataclass(frozen=True)
class TopicNames:
    """The concrete topic names for one deployment (prefix applied)."""

    prefix: str = ""

    def _named(self, name: str) -> str:
        return f"{self.prefix}{name}"

    @property
    def object_created(self) -> str:
        return self._named(OBJECT_CREATED)

    @property
    def schedule_changes(self) -> str:
        return self._named(SCHEDULE_CHANGES)

    @property
    def scan_completed(self) -> str:
        return self._named(SCAN_COMPLETED)

    @property
    def scan_commands(self) -> str:
        return self._named(SCAN_COMMANDS)

    @property
    def dead_letters(self) -> str:
        return self._named(DEAD_LETTERS)

    @property
    def alerts(self) -> str:
        return self._named(ALERTS)

    @property
    def host_signals(self) -> str:
        return self._named(HOST_SIGNALS)

    @property
    def dispatch_queue(self) -> str:
        return self._named(DISPATCH_QUEUE)

    @property
    def scheduler_control(self) -> str:
        return self._named(SCHEDULER_CONTROL)

    @property
    def schedules(self) -> str:
        return self._named(SCHEDULES)

    @property
    def schedule_runs(self) -> str:
        return self._named(SCHEDULE_RUNS)

    def host_keyed(self) -> list[str]:
        """Topics with the worker's partition count, so a key lands on the same partition in each.

        Keyed by host (object) id, or by schedule id for a schedule's messages and records
        (`config` for config changes): the worker meets a host's, or a schedule's, inputs on
        one partition and fans a run out by partition number.
        """
        return [
            self.object_created,
            self.schedule_changes,
            self.scan_completed,
            self.host_signals,
            self.scan_commands,
            self.schedules,
            self.schedule_runs,
        ]
