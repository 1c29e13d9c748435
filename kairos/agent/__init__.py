"""The scanner-agent SDK (docs/agent.md): `Agent` consumes `scan-commands` for one scanner
and publishes `scan-completed`; `kairos.agent.simulate` runs a simulated fleet on it.

This package is an edge: it may use `schemas` and Kairos' shared floor (`kairos.floor`),
never the worker (`streams`) or the API (`api`). `Settings` is re-exported: an agent needs it
to connect and should not depend on where the floor keeps it.
"""

from kairos.agent.sdk import Agent, AgentStats, Handler
from kairos.agent.simulate import FleetSpec, ScannerProfile, run_fleet, simulated_fleet
from kairos.floor.settings import Settings
from schemas.agent import ScanReport
from schemas.commands import ScanCommand
from schemas.results import ScanStatus

__all__ = [
    "Agent",
    "AgentStats",
    "FleetSpec",
    "Handler",
    "ScanCommand",
    "ScanReport",
    "ScanStatus",
    "ScannerProfile",
    "Settings",
    "run_fleet",
    "simulated_fleet",
]
