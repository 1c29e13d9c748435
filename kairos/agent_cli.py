"""`kairos agent …`: scanner agents from the command line (a simulated fleet for now)."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import TYPE_CHECKING, Annotated

import typer

from kairos.floor.settings import Settings

if TYPE_CHECKING:
    from kairos.agent.simulate import FleetSpec

agent_app = typer.Typer(help="Scanner agents (docs/agent.md).", no_args_is_help=True)

log = logging.getLogger("kairos.agent")


@agent_app.command("simulate")
def simulate(
    scanner: Annotated[
        list[str], typer.Option("--scanner", help="Scanner to simulate (repeatable).")
    ] = ["compliance"],  # noqa: B006 - typer reads the default, nothing mutates it
    agents: Annotated[int, typer.Option(min=1, max=64, help="Agents per scanner.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, max=10_000, help="Scans per agent.")] = 10,
    score_mean: Annotated[float, typer.Option(min=0, max=100)] = 75.0,
    score_stddev: Annotated[float, typer.Option(min=0, max=100)] = 20.0,
    failure_rate: Annotated[float, typer.Option(min=0, max=1)] = 0.05,
    scan_seconds: Annotated[float, typer.Option(min=0, help="Wall seconds a scan takes.")] = 0.5,
    scan_jitter: Annotated[float, typer.Option(min=0, max=1, help="± share of it.")] = 0.5,
    seed: Annotated[int | None, typer.Option(help="Seed for repeatable runs.")] = None,
) -> None:
    """Run simulated scanners against the configured Kafka until Ctrl-C or SIGTERM."""
    from kairos.agent.simulate import FleetSpec, ScannerProfile

    spec = FleetSpec(
        scanners=tuple(scanner),
        agents_per_scanner=agents,
        concurrency=concurrency,
        profile=ScannerProfile(
            score_mean=score_mean,
            score_stddev=score_stddev,
            failure_rate=failure_rate,
            scan_seconds=scan_seconds,
            scan_jitter=scan_jitter,
        ),
        seed=seed,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        settings = Settings()
    except ValueError as error:
        typer.echo(f"kairos: invalid settings: {error}", err=True)
        raise typer.Exit(code=2) from None
    asyncio.run(run_simulation(settings, spec))


async def run_simulation(settings: Settings, spec: FleetSpec) -> None:
    """Run the fleet `spec` until SIGINT/SIGTERM, logging progress every 10 s."""
    from kairos.agent.simulate import simulated_fleet

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with simulated_fleet(settings, spec) as fleet:
        log.info(
            "simulating %d agent(s) for %s on %s",
            len(fleet),
            ", ".join(spec.scanners),
            settings.kafka_bootstrap_servers,
        )
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 10)
            except TimeoutError:
                pass
            done = sum(a.stats.succeeded + a.stats.failed for a in fleet)
            in_flight = sum(a.stats.in_flight for a in fleet)
            log.info("scans answered: %d, in flight: %d", done, in_flight)
    log.info("agents stopped")
