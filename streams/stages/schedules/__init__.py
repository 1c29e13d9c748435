"""The generic-schedule stage: thin adapters around `streams.policy.schedules`, `.targets`,
`.schedule_commands` and `.schedule_ledger`, run by the host stage.

Schedule state lives where its key (the schedule id) lands: `schedule.*` events on
schedule-changes and the schedule signals (`schemas.internal`) that concern a schedule (all
but `ScheduleFanOut`), sent on kairos-host-signals keyed by schedule id, reach the partition
that holds its state, so every table write happens while an input of its partition is handled.

Hosts are partitioned by host id, so a run is fanned out: one `ScheduleFanOut` per partition
that can hold a target (all of them unless the run names its ids: static object ids, a
trigger or a retry). Each partition's owner selects its own hosts, sends their dispatch
requests and replies with `ScheduleFanOutDone`; when every reply is in, a scheduled run is
`run_dispatched`, while a trigger run, which the schedule state does not track, is only
recorded. Command ends come back as `ScheduleCommandEnded` for `run_finished`.

One module per concern: `tables` (the tables and the stage's writes and sends), `due` (inputs
keyed by schedule id, the timer and the due index), `runs` and `records` (a run's life on the
schedule side and what it records), `fan_out` (a run's fan-out to the partitions of its
targets), `ledger` (the host side: claims and command ends) and `triggers` (the trigger
follower); `stage` wires them together.
"""

from streams.stages.schedules.stage import ScheduleStage, is_schedule_message
from streams.stages.schedules.triggers import may_change_triggers

__all__ = [
    "ScheduleStage",
    "is_schedule_message",
    "may_change_triggers",
]
