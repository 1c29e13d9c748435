"""Writes the contract as JSON Schema files: `python -m schemas.export [DIR]`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from schemas import topics
from schemas.alerts import AlertChanged
from schemas.changes import ScheduleChange
from schemas.commands import DeadLetter, ScanCommand
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "docs" / "contract"

PUBLIC_TOPICS: dict[str, Any] = {
    topics.OBJECT_CREATED: ObjectEvent,
    topics.SCHEDULE_CHANGES: ScheduleChange,
    topics.SCAN_COMPLETED: ScanCompleted,
    topics.SCAN_COMMANDS: ScanCommand,
    topics.DEAD_LETTERS: DeadLetter,
    topics.ALERTS: AlertChanged,
}


def schema_documents() -> dict[str, str]:
    """File name -> JSON text of every exported schema, deterministic."""
    documents: dict[str, str] = {}
    for topic, model in PUBLIC_TOPICS.items():
        if isinstance(model, type) and issubclass(model, BaseModel):
            schema = model.model_json_schema()
        else:
            schema = TypeAdapter(model).json_schema()
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
        schema["title"] = schema.get("title", topic)
        schema["x-kairos-topic"] = topic
        documents[f"{topic}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return documents


def main(argv: list[str]) -> int:
    target = Path(argv[1]) if len(argv) > 1 else DEFAULT_DIR
    target.mkdir(parents=True, exist_ok=True)
    for name, text in schema_documents().items():
        (target / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
