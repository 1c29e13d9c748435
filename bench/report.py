"""Results on disk: `bench/results/<scenario>-<date>.json`, a Markdown summary and PNG plots."""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BASELINE_COLUMNS = ("SQL poll 120 s", "SQL poll 1 s", "APScheduler", "heapq")


@dataclass
class Figure:
    """One headline number: Kairos, each baseline, and the target it is held to."""

    label: str
    unit: str
    kairos: float | None
    baselines: dict[str, float | None] = field(default_factory=dict)
    target: float | None = None
    better: str = "lower"  # or "higher"
    target_text: str = ""
    scale_note: str = ""
    lower_bound: bool = False  # the Kairos value is a lower bound (e.g. work never finished)

    @property
    def met(self) -> bool | None:
        if self.target is None or self.kairos is None or math.isnan(self.kairos):
            return None
        if self.better == "lower":
            return self.kairos <= self.target
        return self.kairos >= self.target

    @property
    def ratio(self) -> float | None:
        """Kairos ÷ the best baseline (lower-is-better: <1 means Kairos wins)."""
        values = [v for v in self.baselines.values() if v is not None and not math.isnan(v)]
        if not values or self.kairos is None or math.isnan(self.kairos):
            return None
        best = min(values) if self.better == "lower" else max(values)
        return self.kairos / best if best else None


@dataclass
class ScenarioResult:
    key: str
    number: int
    title: str
    mode: str
    params: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    started_at: str = ""
    finished_at: str = ""
    machine: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def machine_info() -> dict[str, Any]:
    memory_kib = 0
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    memory_kib = int(line.split()[1])
    except OSError:
        pass
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from kairos.localstack.apache import KAFKA_VERSION

    return {
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "cpu": model,
        "load_average_at_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "kafka": f"Apache Kafka {KAFKA_VERSION} (KRaft, 1 node, from kairos.localstack)",
        "kernel": platform.release(),
    }


def stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%d-%H%M%S")


def fmt(value: float | None, unit: str, lower_bound: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    prefix = "≥ " if lower_bound else ""
    if unit == "s":
        if abs(value) < 1:
            return f"{prefix}{value * 1000:.1f} ms"
        return f"{prefix}{value:.2f} s"
    if unit in ("/s", "/min"):
        return f"{prefix}{value:,.0f}{unit}"
    if unit == "B/host":
        return f"{prefix}{value:,.0f} B/host"
    if unit == "MB/s":
        return f"{prefix}{value:.1f} MB/s"
    return f"{prefix}{value:,.2f} {unit}".strip()


def met_text(figure: Figure) -> str:
    met = figure.met
    if met is None:
        return "—"
    text = "yes" if met else "**no**"
    return f"{text} ({figure.scale_note})" if figure.scale_note else text


def table_rows(results: list[ScenarioResult]) -> list[list[str]]:
    rows = []
    for result in results:
        if result.error:
            rows.append([f"{result.number}. {result.title}", f"failed: {result.error[:80]}",
                         *["" for _ in BASELINE_COLUMNS], "", "", ""])  # fmt: skip
            continue
        for figure in result.figures:
            ratio = figure.ratio
            rows.append(
                [
                    f"{result.number}. {result.title}: {figure.label}",
                    fmt(figure.kairos, figure.unit, figure.lower_bound),
                    *[fmt(figure.baselines.get(column), figure.unit)
                      if column in figure.baselines else "—" for column in BASELINE_COLUMNS],
                    f"{ratio:.2g}×" if ratio is not None else "—",
                    figure.target_text or "—",
                    met_text(figure),
                ]
            )  # fmt: skip
    return rows


def markdown_table(results: list[ScenarioResult]) -> str:
    header = ["scenario", "Kairos", *BASELINE_COLUMNS, "Kairos ÷ best baseline", "target", "met?"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table_rows(results):
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def machine_line(machine: dict[str, Any]) -> str:
    load = machine.get("load_average_at_start") or []
    load_text = f", load average {load[0]:.2f} at start" if load else ""
    return (
        f"{machine.get('cores')} cores, {machine.get('memory_gib')} GiB "
        f"({machine.get('cpu') or 'unknown CPU'}), Python {machine.get('python')}, "
        f"{machine.get('kafka')}{load_text}"
    )


def scenario_markdown(result: ScenarioResult) -> str:
    out = [
        f"# {result.number}. {result.title} — {result.mode} run",
        "",
        f"- started {result.started_at}, finished {result.finished_at}",
        f"- machine: {machine_line(result.machine)}",
        f"- parameters: `{json.dumps(result.params, sort_keys=True)}`",
        "",
    ]
    if result.error:
        out += ["**The scenario failed:**", "", "```", result.error, "```", ""]
    if result.figures:
        out += [markdown_table([result]), ""]
    if result.notes:
        out += ["## Notes", ""] + [f"- {note}" for note in result.notes] + [""]
    if result.plots:
        out += ["## Plots", ""] + [f"![{name}]({name})" for name in result.plots] + [""]
    out += ["## Details", "", "```json", json.dumps(result.details, indent=2, default=str)[:20000],
            "```", ""]  # fmt: skip
    return "\n".join(out)


def write(result: ScenarioResult, directory: Path, when: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    base = f"{result.key}-{when}"
    data = asdict(result)
    for figure, raw in zip(result.figures, data["figures"], strict=True):
        raw["met"] = figure.met
        raw["ratio"] = figure.ratio
    (directory / f"{base}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (directory / f"{base}.md").write_text(scenario_markdown(result))
    return directory / f"{base}.json"


# --- plots ---------------------------------------------------------------------------


def plot_latency(path: Path, series: dict[str, list[float]], title: str, unit_label: str) -> bool:
    """Histogram and CDF of lateness (seconds) per system, log-scaled x."""
    series = {name: values for name, values in series.items() if values}
    if not series:
        return False
    figure, (histogram, cdf) = plt.subplots(1, 2, figsize=(12, 4.5))
    floor = 1e-4
    everything = [max(v, floor) for values in series.values() for v in values]
    low, high = min(everything), max(everything)
    bins = [low * (high / low) ** (i / 60) for i in range(61)] if high > low else 30
    for name, values in series.items():
        clipped = sorted(max(v, floor) for v in values)
        weights = [1.0 / len(clipped)] * len(clipped)
        histogram.hist(clipped, bins=bins, weights=weights, histtype="step",
                       label=f"{name} (n={len(values):,})")  # fmt: skip
        cdf.plot(clipped, [(i + 1) / len(clipped) for i in range(len(clipped))], label=name)
    for axis in (histogram, cdf):
        axis.set_xscale("log")
        axis.set_xlabel(f"{unit_label} (s, log; values below 0.1 ms drawn at 0.1 ms)")
        axis.grid(True, which="both", alpha=0.3)
    histogram.set_ylabel("fraction of commands per bin")
    histogram.set_title("histogram")
    cdf.set_ylabel("fraction of commands")
    cdf.set_title("CDF")
    cdf.legend(fontsize=8, loc="lower right")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def plot_series(
    path: Path,
    series: dict[str, tuple[list[float], list[float]]],
    title: str,
    ylabel: str,
    *,
    xlabel: str = "seconds since start of the measured phase",
    markers: dict[str, float] | None = None,
    step: bool = True,
) -> bool:
    series = {name: points for name, points in series.items() if points[0]}
    if not series:
        return False
    figure, axis = plt.subplots(figsize=(10, 4.5))
    for name, (xs, ys) in series.items():
        if step:
            axis.step(xs, ys, where="post", label=name)
        else:
            axis.plot(xs, ys, label=name)
    for label, x in (markers or {}).items():
        axis.axvline(x, color="grey", linestyle="--", linewidth=1)
        axis.text(x, axis.get_ylim()[1] * 0.95, f" {label}", fontsize=8, va="top")
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def plot_panels(
    path: Path,
    panels: dict[str, dict[str, tuple[list[float], list[float]]]],
    title: str,
    ylabel: str,
    *,
    xlabel: str = "seconds since the first planned due time",
    markers: dict[str, dict[str, float]] | None = None,
) -> bool:
    """One panel per system (each with its own scales), step lines per series."""
    panels = {name: series for name, series in panels.items()
              if any(points[0] for points in series.values())}  # fmt: skip
    if not panels:
        return False
    figure, axes = plt.subplots(len(panels), 1, figsize=(10, 2.6 * len(panels)), squeeze=False)
    for axis, (name, series) in zip(axes[:, 0], panels.items(), strict=True):
        for label, (xs, ys) in series.items():
            if xs:
                axis.step(xs, ys, where="post", label=label)
        for label, x in ((markers or {}).get(name) or {}).items():
            axis.axvline(x, color="grey", linestyle="--", linewidth=1)
            axis.annotate(f" {label}", (x, 1), xycoords=("data", "axes fraction"),
                          fontsize=8, va="top")  # fmt: skip
        axis.set_title(name, fontsize=10)
        axis.set_ylabel(ylabel)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8, loc="upper right")
    axes[-1, 0].set_xlabel(xlabel)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True
