"""The global scheduler configuration: one record, changed only by events."""

from __future__ import annotations

from pydantic import Field

from schemas.base import ComplianceState, Contract

ADAPTIVE_SCANNER = "compliance"
"""The scanner whose results move a host's compliance state: every host's own schedule
commands it."""


SCANNER_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


class ScannerSpec(Contract):
    """One scanner of the registry: what it is, and the slots and limits its commands get.

    Every scanner has its own pool of `max_concurrent` slots; `max_concurrent_scans` stays the
    ceiling over all pools. A scanner deactivated keeps its queued commands, held until it is
    active again."""

    name: str = Field(pattern=SCANNER_NAME_PATTERN, description="Commands name it in `scanner`.")
    description: str = Field(default="", max_length=500)
    is_active: bool = Field(
        default=True, description="false: its queued commands are held, none is issued."
    )
    max_concurrent: int = Field(
        default=5, ge=1, le=100_000, description="Its pool: its commands in flight at most."
    )
    timeout_seconds: int = Field(
        default=600, ge=60, le=86_400, description="A command without a result by then failed."
    )
    retry_delay_seconds: int = Field(
        default=300, ge=0, le=86_400, description="Delay before a failed run is retried."
    )
    default_priority: int = Field(
        default=4,
        ge=1,
        le=10,
        description="The priority of a schedule's or a trigger's commands that name no other"
        " (the adaptive scanner ranks its hosts by their state instead).",
    )


class SchedulerConfig(Contract):
    """Current scheduler configuration. Defaults are the documented production defaults."""

    enabled: bool = Field(default=True, description="Dispatch is paused while false.")
    interval_unknown: int = Field(default=0, ge=0, le=2880, description="Minutes; 0 = at once.")
    interval_critical: int = Field(default=60, ge=15, le=2880, description="Minutes.")
    interval_low: int = Field(default=120, ge=30, le=2880, description="Minutes.")
    interval_partial: int = Field(default=360, ge=30, le=2880, description="Minutes.")
    interval_mostly_compliant: int = Field(default=720, ge=30, le=2880, description="Minutes.")
    interval_compliant: int = Field(default=1440, ge=60, le=2880, description="Minutes.")
    interval_maintenance: int = Field(default=2880, ge=60, le=2880, description="Minutes.")
    priority_unknown: int = Field(default=10, ge=1, le=10)
    priority_critical: int = Field(default=9, ge=1, le=10)
    priority_low: int = Field(default=7, ge=1, le=10)
    priority_partial: int = Field(default=6, ge=1, le=10)
    priority_mostly_compliant: int = Field(default=4, ge=1, le=10)
    priority_compliant: int = Field(default=3, ge=1, le=10)
    priority_maintenance: int = Field(default=1, ge=1, le=10)
    max_interval_minutes: int = Field(
        default=2880, ge=1, le=2880, description="Ceiling on every interval (the 48-hour promise)."
    )
    max_concurrent_scans: int = Field(
        default=5, ge=1, le=100_000, description="Global cap on commands in flight."
    )
    scan_timeout_seconds: int = Field(
        default=600, ge=60, le=3600, description="A command without a result by then failed."
    )
    retry_delay_seconds: int = Field(
        default=300, ge=0, le=86_400, description="Delay before retrying a failed scan."
    )
    initial_spread_seconds: int = Field(
        default=0, ge=0, le=86_400, description="Spread first scans of new hosts over this window."
    )
    priority_aging_minutes: int = Field(
        default=0,
        ge=0,
        le=10_080,
        description="A waiting command gains one priority step per this many minutes past its "
        "due time (up to the top priority), so low priorities are never starved; 0 = off.",
    )
    max_concurrent_scans_per_organization: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="Cap on one organization's commands in flight, under the global cap; "
        "0 = off. Commands of equal priority are shared between organizations in turn.",
    )
    promise_guard_minutes: int = Field(
        default=120,
        ge=0,
        le=2880,
        description="A waiting command whose host breaks its max_interval_minutes promise "
        "within this many minutes outranks every priority but the top one, earliest promise "
        "first; 0 = off.",
    )
    alert_score_drop: int = Field(
        default=20,
        ge=1,
        le=100,
        description="Points a host's score may fall from one result to the next before a "
        "score_dropped alert is raised.",
    )
    alert_cap_saturated_minutes: int = Field(
        default=15,
        ge=1,
        le=1440,
        description="Minutes the commands in flight may stay at the cap before a "
        "cap_saturated alert is raised.",
    )
    alert_trend_scans: int = Field(
        default=3,
        ge=2,
        le=20,
        description="A host whose score fell on each of its last this many scans raises a "
        "score_falling alert; resolved by a scan that does not fall.",
    )
    alert_org_trend_points: int = Field(
        default=10,
        ge=1,
        le=100,
        description="Points an organization's average score may fall over 24 h before an "
        "org_score_falling alert is raised; resolved once the average climbs again.",
    )
    scanners: tuple[ScannerSpec, ...] = Field(
        default=(),
        description="The scanner registry, by name. `compliance` (the adaptive scanner) is"
        " always registered: until it is given an entry here, it runs with"
        " max_concurrent_scans, scan_timeout_seconds and retry_delay_seconds.",
    )
    version: int = Field(default=0, ge=0, description="Bumped on every accepted change.")

    def scanner(self, name: str) -> ScannerSpec | None:
        """The registry's entry for `name`; None for a scanner it does not name."""
        for spec in self.scanners:
            if spec.name == name:
                return spec
        if name == ADAPTIVE_SCANNER:
            return ScannerSpec(
                name=ADAPTIVE_SCANNER,
                description="The adaptive compliance scanner: every host, on its posture's"
                " interval.",
                max_concurrent=self.max_concurrent_scans,
                timeout_seconds=self.scan_timeout_seconds,
                retry_delay_seconds=self.retry_delay_seconds,
            )
        return None

    def registry(self) -> tuple[ScannerSpec, ...]:
        """Every registered scanner, `compliance` first."""
        adaptive = self.scanner(ADAPTIVE_SCANNER)
        assert adaptive is not None
        return (adaptive, *(spec for spec in self.scanners if spec.name != ADAPTIVE_SCANNER))

    def interval_minutes(self, state: ComplianceState) -> int:
        return int(getattr(self, f"interval_{state.value}"))

    def priority(self, state: ComplianceState) -> int:
        return int(getattr(self, f"priority_{state.value}"))


class ConfigChanges(Contract):
    """A partial update of SchedulerConfig; every field optional, same ranges."""

    enabled: bool | None = Field(
        default=None, description="Pause (false) or resume (true) dispatch, as scheduler.toggled."
    )
    interval_unknown: int | None = Field(default=None, ge=0, le=2880)
    interval_critical: int | None = Field(default=None, ge=15, le=2880)
    interval_low: int | None = Field(default=None, ge=30, le=2880)
    interval_partial: int | None = Field(default=None, ge=30, le=2880)
    interval_mostly_compliant: int | None = Field(default=None, ge=30, le=2880)
    interval_compliant: int | None = Field(default=None, ge=60, le=2880)
    interval_maintenance: int | None = Field(default=None, ge=60, le=2880)
    priority_unknown: int | None = Field(default=None, ge=1, le=10)
    priority_critical: int | None = Field(default=None, ge=1, le=10)
    priority_low: int | None = Field(default=None, ge=1, le=10)
    priority_partial: int | None = Field(default=None, ge=1, le=10)
    priority_mostly_compliant: int | None = Field(default=None, ge=1, le=10)
    priority_compliant: int | None = Field(default=None, ge=1, le=10)
    priority_maintenance: int | None = Field(default=None, ge=1, le=10)
    max_interval_minutes: int | None = Field(default=None, ge=1, le=2880)
    max_concurrent_scans: int | None = Field(default=None, ge=1, le=100_000)
    scan_timeout_seconds: int | None = Field(default=None, ge=60, le=3600)
    retry_delay_seconds: int | None = Field(default=None, ge=0, le=86_400)
    initial_spread_seconds: int | None = Field(default=None, ge=0, le=86_400)
    priority_aging_minutes: int | None = Field(default=None, ge=0, le=10_080)
    max_concurrent_scans_per_organization: int | None = Field(default=None, ge=0, le=100_000)
    promise_guard_minutes: int | None = Field(default=None, ge=0, le=2880)
    alert_score_drop: int | None = Field(default=None, ge=1, le=100)
    alert_cap_saturated_minutes: int | None = Field(default=None, ge=1, le=1440)
    alert_trend_scans: int | None = Field(default=None, ge=2, le=20)
    alert_org_trend_points: int | None = Field(default=None, ge=1, le=100)
