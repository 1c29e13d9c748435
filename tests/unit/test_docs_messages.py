"""Every worked example in docs/messages.md is a valid message of its topic's contract."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from kairos.floor.recurrence import schedule_problem
from schemas.export import PUBLIC_TOPICS
from schemas.schedules import ScheduleUpserted

DOC = Path(__file__).resolve().parents[2] / "docs" / "messages.md"
EXAMPLE = re.compile(r"<!-- example: ([a-z-]+) -->\n```json\n(.*?)\n```", re.DOTALL)


def examples() -> list[tuple[str, str]]:
    return EXAMPLE.findall(DOC.read_text(encoding="utf-8"))


def test_every_public_topic_has_a_worked_example() -> None:
    assert {topic for topic, _ in examples()} == set(PUBLIC_TOPICS)


@pytest.mark.parametrize(("topic", "text"), examples(), ids=lambda v: str(v)[:30])
def test_docs_example_is_valid_against_its_topic_model(topic: str, text: str) -> None:
    message = TypeAdapter(PUBLIC_TOPICS[topic]).validate_python(json.loads(text))
    if isinstance(message, ScheduleUpserted):
        assert schedule_problem(message.schedule) is None
