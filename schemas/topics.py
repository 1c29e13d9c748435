"""Topic names of the contract. A deployment-wide prefix may be prepended to each."""

from __future__ import annotations

from dataclasses import dataclass

OBJECT_CREATED = "object-created"
SCHEDULE_CHANGES = "schedule-changes"
SCAN_COMPLETED = "scan-completed"
SCAN_COMMANDS = "scan-commands"
DEAD_LETTERS = "dead-letters"
ALERTS = "alerts"

# Kairos-internal topics; their messages are in schemas.internal.
HOST_SIGNALS = "kairos-host-signals"
DISPATCH_QUEUE = "kairos-dispatch-queue"
HOST_STATE = "kairos-host-state"
SCHEDULER_CONTROL = "kairos-scheduler-control"
SCHEDULES = "kairos-schedules"
"""Generic schedules' state, compacted, key = schedule id (read whole by every worker)."""
SCHEDULE_RUNS = "kairos-schedule-runs"
"""One record per schedule run (fired, skipped, failed), key = schedule id; kept by time."""

CONFIG_KEY = "config"
"""Key of schedule-changes messages that concern the global scheduler config."""


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
    def host_state(self) -> str:
        return self._named(HOST_STATE)

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
        """Topics keyed by host id; they must all have the same partition count."""
        return [
            self.object_created,
            self.schedule_changes,
            self.scan_completed,
            self.host_signals,
            self.scan_commands,
            self.host_state,
            self.schedules,
            self.schedule_runs,
        ]
