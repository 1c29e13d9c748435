"""The scenario registry: `python -m bench NAME` runs one, `all` runs those marked in_all."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    key: str
    number: int
    title: str
    module: str
    in_all: bool
    needs_stack: bool = True
    """False: a micro-benchmark run as `main(argv)`, without broker or database."""

    def runner(self):  # noqa: ANN201 - returns the module's async run(ctx, systems)
        return importlib.import_module(self.module).run

    def micro(self):  # noqa: ANN201 - returns the module's main(argv) -> exit code
        return importlib.import_module(self.module).main


SCENARIOS = [
    Scenario("kafka", 1, "Kafka client ceiling", "bench.scenarios.kafka_ceiling", True),
    Scenario("steady", 2, "Steady dispatch", "bench.scenarios.steady", True),
    Scenario("burst", 3, "Burst", "bench.scenarios.burst", True),
    Scenario("throughput", 4, "Event throughput", "bench.scenarios.throughput", True),
    Scenario("projection", 5, "Projection", "bench.scenarios.projection", True),
    Scenario("api", 6, "API latency", "bench.scenarios.api", True),
    Scenario("memory", 7, "Memory per host", "bench.scenarios.memory", True),
    Scenario("recovery", 8, "Recovery after kill -9", "bench.scenarios.recovery", True),
    Scenario("cron", 9, "Cron schedules", "bench.scenarios.cron", True),
    Scenario(
        "recurrence", 10, "Recurrence micro-benchmark", "bench.scenarios.recurrence", False, False
    ),
    Scenario("policy", 11, "Policy simulator", "bench.scenarios.policy", False, False),
]


def find(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if name in (scenario.key, str(scenario.number)):
            return scenario
    raise KeyError(name)
