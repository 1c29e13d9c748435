"""`python -m bench SCENARIO [--scale N] [--quick]`: run, tear down, write results."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
import time
import traceback
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bench import report
from bench.scenarios import SCENARIOS, Scenario, find
from bench.scenarios.common import Context
from bench.stack import BenchStack
from bench.ui import BenchUI

README = Path(__file__).resolve().parent / "README.md"
TABLE_START = "<!-- bench-table:start -->"
TABLE_END = "<!-- bench-table:end -->"
SYSTEM_NAMES = ("kairos", "kairos2", "kairos-static", "heapq", "sql120", "sql1", "apscheduler")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = [s.key for s in SCENARIOS]
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Kairos benchmarks. Scenarios: "
        + ", ".join(f"{s.number}={s.key}" for s in SCENARIOS)
        + "; all = every scenario.",
    )
    parser.add_argument("scenario", help=f"one of {', '.join(names)}, a number, or all")
    parser.add_argument(
        "--scale",
        type=int,
        default=None,
        help="the scenario's main size (hosts, messages); overrides the default",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes that fit a 2-core machine in minutes"
    )
    parser.add_argument(
        "--systems",
        default=None,
        help=f"comma list to run only some systems: {', '.join(SYSTEM_NAMES)}",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=report.RESULTS_DIR,
        help="results directory (default bench/results)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the scratch directory (broker data, logs) after the run",
    )
    parser.add_argument(
        "--no-readme",
        action="store_true",
        help="do not write the table into bench/README.md after `all`",
    )
    return parser.parse_args(argv)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Transient metadata errors on freshly created topics; real failures surface as exceptions.
    for noisy in ("aiokafka", "kafka", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    if args.scenario == "all":
        chosen = [s for s in SCENARIOS if s.in_all]
    else:
        try:
            chosen = [find(args.scenario)]
        except KeyError:
            print(f"unknown scenario {args.scenario!r}", file=sys.stderr)
            return 2
    if len(chosen) == 1 and not chosen[0].needs_stack:
        return int(chosen[0].micro()([]))
    systems = set(args.systems.split(",")) if args.systems else None
    signal.signal(signal.SIGTERM, _raise_interrupt)
    return asyncio.run(_run_all(args, chosen, systems))


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


async def _run_all(
    args: argparse.Namespace, scenarios: list[Scenario], systems: set[str] | None
) -> int:
    when = report.stamp()
    machine = report.machine_info()
    results: list[report.ScenarioResult] = []
    started = time.monotonic()
    failures = 0
    with BenchStack(keep=args.keep) as stack, BenchUI() as ui:
        ui.say(f"[bold]Kairos bench[/bold] {'quick' if args.quick else 'full'} run {when}; "
               f"scratch {stack.root}")  # fmt: skip
        ui.say(f"machine: {report.machine_line(machine)}")
        with ui.phase("starting Apache Kafka and PostgreSQL"):
            await asyncio.to_thread(lambda: stack.bootstrap_servers)
            await asyncio.to_thread(stack.database, "bench_probe")
        for scenario in scenarios:
            ctx = Context(stack=stack, ui=ui, quick=args.quick, scale=args.scale,
                          out_dir=args.out, when=when)  # fmt: skip
            ui.say(f"[bold]{scenario.number}. {scenario.title}[/bold]")
            scenario_started = datetime.now(UTC)
            load_before = os.getloadavg()
            try:
                result = await scenario.runner()(ctx, systems)
            except KeyboardInterrupt:
                raise
            except Exception as error:  # noqa: BLE001 - one failed scenario must not stop `all`
                failures += 1
                result = report.ScenarioResult(
                    key=scenario.key, number=scenario.number, title=scenario.title,
                    mode=ctx.mode, params={"scale": args.scale},
                    error=f"{type(error).__name__}: {error}\n{traceback.format_exc()[-3000:]}",
                )  # fmt: skip
                for child in list(stack.children):
                    child.stop(grace=3.0)
                stack.children.clear()
            result.started_at = scenario_started.isoformat(timespec="seconds")
            result.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
            result.machine = machine
            result.details["load_average"] = {"start": list(load_before),
                                              "end": list(os.getloadavg())}  # fmt: skip
            path = report.write(result, args.out, when)
            ui.say(
                f"  → {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}"
            )
            for row in report.table_rows([result]):
                ui.say("  " + " | ".join(cell for cell in row if cell))
            results.append(result)
    elapsed = time.monotonic() - started
    summary = report.markdown_table(results)
    print()
    print(summary)
    print(f"\n{len(results)} scenario(s) in {elapsed / 60:.1f} min; {failures} failed.")
    if len(scenarios) > 1 or args.scenario == "all":
        _write_summary(args, results, when, machine, elapsed)
    return 1 if failures else 0


def _write_summary(args, results, when, machine, elapsed) -> None:  # noqa: ANN001
    mode = "quick" if args.quick else "full"
    header = (
        f"Run `{when}` ({mode}, `python -m bench all{' --quick' if args.quick else ''}"
        f"{f' --scale {args.scale}' if args.scale else ''}`), {elapsed / 60:.1f} min, "
        f"on {report.machine_line(machine)}."
    )
    body = header + "\n\n" + report.markdown_table(results) + "\n"
    (args.out / f"all-{when}.md").write_text(f"# Kairos bench summary\n\n{body}")
    (args.out / f"all-{when}.json").write_text(
        json.dumps([asdict(r) for r in results], indent=2, default=str) + "\n"
    )
    if args.no_readme or not README.is_file():
        return
    text = README.read_text()
    if TABLE_START in text and TABLE_END in text:
        pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.S)
        README.write_text(pattern.sub(lambda _: f"{TABLE_START}\n{body}{TABLE_END}", text))
