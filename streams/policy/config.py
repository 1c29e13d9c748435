"""Changes to the global scheduler configuration."""

from __future__ import annotations

from pydantic import ValidationError

from schemas.changes import ConfigUpdated, ScannerUpserted, SchedulerToggled
from schemas.commands import Rejection
from schemas.config import SchedulerConfig


def apply_config_change(
    config: SchedulerConfig, change: ConfigUpdated | SchedulerToggled | ScannerUpserted
) -> SchedulerConfig | Rejection:
    """The config after `change`, with its version bumped; a refused change is a Rejection.

    A change is applied whole or not at all.
    """
    if isinstance(change, SchedulerToggled):
        updates: dict[str, object] = {"enabled": change.enabled}
    elif isinstance(change, ScannerUpserted):
        kept = [spec.model_dump() for spec in config.scanners if spec.name != change.scanner.name]
        updates = {"scanners": [*kept, change.scanner.model_dump()]}
    else:
        updates = change.changes.model_dump(exclude_none=True)
        if not updates:
            return Rejection(reason="config.updated carries no changes")
    merged = {**config.model_dump(), **updates, "version": config.version + 1}
    try:
        return SchedulerConfig.model_validate(merged)
    except ValidationError as error:
        return Rejection(reason=f"config change refused: {error}")
