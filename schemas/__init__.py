"""The Kairos contract: every message on every topic and every API body (v1)."""

from schemas.base import SCHEMA_VERSION, CommandReason, ComplianceState, HostStatus
from schemas.changes import (
    ConfigUpdated,
    HostMaintenanceSet,
    HostScanRequested,
    HostsInitializeRequested,
    HostStatusChanged,
    ScheduleChange,
    SchedulerToggled,
)
from schemas.commands import ADAPTIVE_SCANNER, DeadLetter, Rejection, ScanCommand
from schemas.config import ConfigChanges, SchedulerConfig
from schemas.objects import ObjectAttributes, ObjectEvent, Operation
from schemas.results import ScanCompleted, ScanStatus
from schemas.state import HostSchedule, HostStateChanged, InFlightCommand

__all__ = [
    "ADAPTIVE_SCANNER",
    "SCHEMA_VERSION",
    "CommandReason",
    "ComplianceState",
    "ConfigChanges",
    "ConfigUpdated",
    "DeadLetter",
    "HostMaintenanceSet",
    "HostScanRequested",
    "HostSchedule",
    "HostStateChanged",
    "HostStatus",
    "HostStatusChanged",
    "HostsInitializeRequested",
    "InFlightCommand",
    "ObjectAttributes",
    "ObjectEvent",
    "Operation",
    "Rejection",
    "ScanCommand",
    "ScanCompleted",
    "ScanStatus",
    "ScheduleChange",
    "SchedulerConfig",
    "SchedulerToggled",
]
