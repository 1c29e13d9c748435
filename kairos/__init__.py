"""Kairos' front door and its shared floor.

The front door is the operator's: the CLI (`kairos.cli` and its siblings), the local dev stack
(`kairos.devstack`, `kairos.localstack`) and the scanner-agent SDK (`kairos.agent`). The floor
(`kairos.floor`) is what every process stands on: settings, clock, database, recurrence.
"""
