"""A small Prometheus text-exposition registry shared by the worker and the projector.

Counters, gauges and histograms with fixed label names; gauges may be read at scrape time from a
callback. No client library: the format is a few lines of text, and each process owns one
registry passed to whoever records into it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TypeVar

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENESS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

Labels = tuple[str, ...]


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{name}="{escape(value)}"' for name, value in pairs)
    return f"{{{inner}}}" if inner else ""


def number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def sample_lines(name: str, label_names: Labels, values: dict[Labels, float]) -> list[str]:
    return [
        f"{name}{render_labels(zip(label_names, labels, strict=True))} {number(value)}"
        for labels, value in sorted(values.items())
    ]


class Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, label_names: Labels = ()) -> None:
        self.name = name
        self.help_text = help_text
        self.label_names = label_names

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help_text}", f"# TYPE {self.name} {self.kind}"]

    def lines(self) -> list[str]:
        raise NotImplementedError


class Counter(Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str, label_names: Labels = ()) -> None:
        super().__init__(name, help_text, label_names)
        self.values: defaultdict[Labels, float] = defaultdict(float)

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        self.values[labels] += amount

    def lines(self) -> list[str]:
        return sample_lines(self.name, self.label_names, self.values)


class Gauge(Metric):
    """Set directly, or read at scrape time from `read`, which returns {labels: value}."""

    kind = "gauge"

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Labels = (),
        read: Callable[[], dict[Labels, float]] | None = None,
    ) -> None:
        super().__init__(name, help_text, label_names)
        self.values: dict[Labels, float] = {}
        self.read = read

    def set(self, value: float, *labels: str) -> None:
        self.values[labels] = value

    def lines(self) -> list[str]:
        values = self.read() if self.read is not None else self.values
        return sample_lines(self.name, self.label_names, values)


class CounterReading(Gauge):
    """A counter kept elsewhere (a plain int), read at scrape time."""

    kind = "counter"


class Histogram(Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]) -> None:
        super().__init__(name, help_text)
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1

    def lines(self) -> list[str]:
        lines = []
        cumulative = 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            cumulative += count
            lines.append(f'{self.name}_bucket{{le="{number(bound)}"}} {cumulative}')
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
        lines.append(f"{self.name}_sum {number(self.total)}")
        lines.append(f"{self.name}_count {self.count}")
        return lines


MetricT = TypeVar("MetricT", bound=Metric)


class Registry:
    def __init__(self) -> None:
        self.metrics: list[Metric] = []

    def add(self, metric: MetricT) -> MetricT:
        self.metrics.append(metric)
        return metric

    def render(self) -> str:
        out: list[str] = []
        for metric in self.metrics:
            out += metric.header()
            out += metric.lines()
        return "\n".join(out) + "\n"
