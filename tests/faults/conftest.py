"""Fault tests: real brokers, real processes, real kills. Each records the figures it measured.

The figures are printed in a "faults" section at the end of the run, one line per test: what was
sent, what came out, what was lost, how many due instances got a second command id, and the most
commands in flight seen against the cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

FIGURES: list[FaultFigures] = []


@dataclass
class FaultFigures:
    test: str
    sent: int = 0
    came_out: int = 0
    lost: int = 0
    second_command_ids: int = 0
    max_in_flight: int = 0
    cap: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        extra = "".join(f", {key} {value}" for key, value in self.extra.items())
        return (
            f"{self.test}: sent {self.sent}, came out {self.came_out}, lost {self.lost},"
            f" second command ids {self.second_command_ids},"
            f" max in flight {self.max_in_flight} (cap {self.cap}){extra}"
        )


@pytest.fixture
def fault_figures(request: pytest.FixtureRequest) -> Iterator[FaultFigures]:
    figures = FaultFigures(test=request.node.name)
    yield figures
    FIGURES.append(figures)


@pytest.fixture
def apache_only(broker_kind: str) -> None:
    if broker_kind == "tansu":
        pytest.skip(
            "fault tests are proved on Apache Kafka, the broker production runs; tansu is the"
            " memory-only dev fallback and keeps no data across a broker restart"
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("faults")
        for figures in FIGURES:
            terminalreporter.write_line(figures.line())
