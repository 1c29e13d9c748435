"""`kairos`: the operator interface. Other tools script against these commands."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kairos.agent_cli import agent_app
from kairos.settings import Settings

if TYPE_CHECKING:
    from streams.projection.runner import Projector

app = typer.Typer(
    help="Kairos: an event-sourced scan scheduler on Kafka streams.", no_args_is_help=True
)
db_app = typer.Typer(help="Read-model database.", no_args_is_help=True)
token_app = typer.Typer(help="API bearer tokens.", no_args_is_help=True)
app.add_typer(db_app, name="db")
schedules_app = typer.Typer(
    help="Generic schedules (cron, interval, RRULE, triggers). A schedule's name is its id.",
    no_args_is_help=True,
)
app.add_typer(token_app, name="token")
app.add_typer(schedules_app, name="schedules")
app.add_typer(agent_app, name="agent")

log = logging.getLogger("kairos")

PROJECTOR_STARTED_LINE = "projector started"
"""Logged once `kairos projector` has passed its dependency checks; supervisors wait for it."""


class BrokerChoice(StrEnum):
    AUTO = "auto"
    APACHE = "apache"
    TANSU = "tansu"


def _fail(message: str) -> typer.Exit:
    """One clear line on stderr and a non-zero exit: no traceback storm."""
    print(f"kairos: {message}", file=sys.stderr)
    return typer.Exit(code=2)


def _settings(**overrides: object) -> Settings:
    try:
        base = Settings()
    except ValueError as error:
        raise _fail(f"invalid settings: {error}") from None
    if overrides:
        return base.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    return base


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def prepare_dependencies(settings: Settings, *, topics: bool) -> None:
    """Check Kafka and PostgreSQL, create topics, apply migrations; exit clearly on failure."""
    from kairos.db import DatabaseUnavailable, migrate
    from streams.admin import KafkaUnavailable, TopicLayoutMismatch, admin_client, ensure_topics

    async def prepare() -> None:
        if topics:
            await ensure_topics(settings)
        else:
            client = await admin_client(settings)
            await client.close()
        await migrate(settings.database_url, timeout=settings.connect_timeout_seconds)

    try:
        asyncio.run(asyncio.wait_for(prepare(), settings.connect_timeout_seconds * 3))
    except (KafkaUnavailable, DatabaseUnavailable, TopicLayoutMismatch) as error:
        raise _fail(str(error)) from None
    except TimeoutError:
        raise _fail(
            f"gave up reaching Kafka at {settings.kafka_bootstrap_servers} or PostgreSQL "
            "within the connect timeout"
        ) from None


@app.command()
def worker(
    workdir: Annotated[Path | None, typer.Option(help="Local data directory.")] = None,
    clock_speed: Annotated[
        float | None,
        typer.Option(help="Run scheduler time N times faster (demos and simulations only)."),
    ] = None,
) -> None:
    """Run one scheduling worker; several with the same settings form one group."""
    _logging()
    settings = _settings(workdir=workdir, clock_speed=clock_speed)
    prepare_dependencies(settings, topics=True)
    run_worker(settings)


@app.command("worker-alive")
def worker_alive(
    workdir: Annotated[Path | None, typer.Option(help="The worker's data directory.")] = None,
    max_age: Annotated[
        float, typer.Option(help="Seconds without a heartbeat before the worker counts as dead.")
    ] = 15.0,
) -> None:
    """Liveness probe for supervisors: exit 0 if the worker's heartbeat is fresh, 1 if not."""
    from streams.liveness import heartbeat_age

    settings = _settings(workdir=workdir)
    age = heartbeat_age(settings.workdir)
    if age is None or age > max_age:
        seen = "no heartbeat" if age is None else f"last heartbeat {age:.0f}s ago"
        print(f"kairos: worker at {settings.workdir} is not alive ({seen})", file=sys.stderr)
        raise typer.Exit(1)
    print(f"alive (heartbeat {age:.1f}s ago)")


def run_worker(settings: Settings) -> None:
    import faust

    from streams.app import create_worker

    asyncio.set_event_loop(asyncio.new_event_loop())
    settings.workdir.mkdir(parents=True, exist_ok=True)
    kairos_worker = create_worker(settings)
    faust.Worker(
        kairos_worker.app,
        loglevel="INFO",
        workdir=str(settings.workdir),
        override_logging=False,
    ).execute_from_commandline()


@app.command("projector")
def projector_command(
    clock_speed: Annotated[
        float | None,
        typer.Option(help="Match workers started with the same --clock-speed (simulations)."),
    ] = None,
) -> None:
    """Keep the PostgreSQL read model current in a process of its own.

    Pair it with workers started with KAIROS_PROJECTOR_ENABLED=false. Ctrl-C stops it.
    """
    _logging()
    settings = _settings(clock_speed=clock_speed)
    prepare_dependencies(settings, topics=True)
    run_projector(settings)


def run_projector(settings: Settings) -> None:
    from kairos.clock import clock_for_speed
    from streams.projection.runner import Projector

    # The clock a worker builds, so projection_progress lag is measured in scheduler time.
    clock = clock_for_speed(settings.clock_speed, settings.clock_origin, settings.clock_start)
    projector = Projector(settings, clock)
    try:
        asyncio.run(_project_until_signalled(projector, settings))
    except Exception:  # noqa: BLE001 - the process's top level: say why it died, exit non-zero
        log.exception("projector stopped by an error")
        raise typer.Exit(code=1) from None
    log.info("projector stopped; %d changes applied", projector.applied)


async def _project_until_signalled(projector: Projector, settings: Settings) -> None:
    """Project until SIGTERM or SIGINT, then let the consumer leave its group cleanly."""
    # The handlers only set an event: cancelling from them, a second Ctrl-C would also
    # cancel the consumer's clean stop in the projector's `finally`.
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(stop_signal, stop_requested.set)
    projecting = asyncio.create_task(projector.run(), name="projector")
    stopping = asyncio.create_task(stop_requested.wait(), name="stop-requested")
    metrics_runner = None
    if settings.metrics_port:
        from kairos.prometheus import Registry
        from streams.metrics import serve

        registry = Registry()
        projector.register_metrics(registry)
        metrics_runner = await serve(
            registry,
            lambda: not projecting.done(),
            host=settings.metrics_host,
            port=settings.metrics_port,
        )
    group = f"{settings.topic_prefix}{settings.app_id}-projector"
    log.info("%s: consumer group %s", PROJECTOR_STARTED_LINE, group)
    await asyncio.wait({projecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    projecting.cancel()
    try:
        await projecting
    except asyncio.CancelledError:
        pass
    finally:
        if metrics_runner is not None:
            await metrics_runner.cleanup()


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Bind address.")] = None,
    port: Annotated[int | None, typer.Option(help="Port.")] = None,
) -> None:
    """Serve the HTTP API."""
    import uvicorn

    from api.main import create_app

    _logging()
    settings = _settings(api_host=host, api_port=port)
    prepare_dependencies(settings, topics=False)
    uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port)


@app.command()
def dev(
    broker: Annotated[BrokerChoice, typer.Option(help="Which broker to run.")] = BrokerChoice.AUTO,
    reset: Annotated[bool, typer.Option(help="Wipe the local event store and read model.")] = False,
    port: Annotated[int, typer.Option(help="API port.")] = 8000,
    home: Annotated[Path, typer.Option(help="Project-local data folder.")] = Path(".kairos"),
) -> None:
    """Run the whole stack locally: broker, PostgreSQL, worker and API. Ctrl-C stops it."""
    from rich.console import Console

    from kairos import devstack
    from kairos.localstack.errors import LocalStackError

    console = Console()
    home = home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    stack = devstack.DevStack(home=home)
    try:
        with console.status("starting the broker..."):
            servers = devstack.start_broker(stack, broker.value, reset=reset)
        memory_only = stack.broker_name.startswith("tansu")
        with console.status("starting PostgreSQL..."):
            dsn = devstack.start_database(stack, clean=reset or memory_only)
        settings = _settings().model_copy(
            update={
                "kafka_bootstrap_servers": servers,
                "database_url": dsn,
                "kafka_idempotence": not memory_only,
                "partitions": 4,
                "api_port": port,
            }
        )
        prepare_dependencies(settings, topics=True)
        token = devstack.dev_admin_token(settings)
        env = devstack.child_env(settings)
        devstack.spawn(stack, "worker", ["worker", "--workdir", str(home / "worker")], env)
        devstack.spawn(stack, "api", ["api", "--host", "127.0.0.1", "--port", str(port)], env)
        url = f"http://127.0.0.1:{port}"
        with console.status("waiting for the API..."):
            if not devstack.wait_http_ok(f"{url}/healthz", timeout=60):
                raise _fail(f"the API did not come up; see {home / 'api.log'}")
        console.print(f"[bold]Broker:[/bold] {stack.broker_name} - {stack.broker_note}")
        console.print(f"[bold]Read model:[/bold] {_redacted(dsn)}")
        console.print(f"[bold]API:[/bold] {url}  (docs at {url}/docs)")
        console.print(f"[bold]Logs:[/bold] {home}/worker.log, {home}/api.log")
        console.print("[bold]Development admin token[/bold] (Authorization: Bearer ...):")
        print(token, flush=True)
        console.print("Ctrl-C stops everything.")
        while all(process.poll() is None for _, process in stack.processes):
            time.sleep(0.5)
        dead = [name for name, process in stack.processes if process.poll() is not None]
        raise _fail(f"{', '.join(dead)} stopped unexpectedly; see its log in {home}")
    except KeyboardInterrupt:
        console.print("stopping...")
    except LocalStackError as error:
        raise _fail(str(error)) from None
    finally:
        stack.stop()


def _redacted(dsn: str) -> str:
    from kairos.db import redact

    return redact(dsn)


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply pending read-model migrations (idempotent)."""
    from kairos.db import DatabaseUnavailable, migrate

    settings = _settings()
    try:
        applied = asyncio.run(
            migrate(settings.database_url, timeout=settings.connect_timeout_seconds)
        )
    except DatabaseUnavailable as error:
        raise _fail(str(error)) from None
    print("applied: " + ", ".join(applied) if applied else "database schema is current")


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="GUEST, SECURITY_ANALYST, SECURITY_ADMIN, SUPER_ADMIN")],
    name: Annotated[str, typer.Option(help="Who or what the token is for.")] = "cli",
    ttl: Annotated[
        str | None,
        typer.Option(help="Lifetime: a number and s, m, h or d (e.g. 30d); default never."),
    ] = None,
) -> None:
    """Create an API token; the last line printed is the token alone."""
    from api.tokens import issue_token, parse_ttl
    from kairos.db import DatabaseUnavailable, connect, migrate
    from schemas.api import Role

    try:
        chosen = Role[role.upper()]
    except KeyError:
        raise _fail(
            f"unknown role {role!r}; choose one of {', '.join(r.name for r in Role)}"
        ) from None
    try:
        lifetime = parse_ttl(ttl) if ttl is not None else None
    except ValueError as error:
        raise _fail(str(error)) from None
    settings = _settings()

    async def create() -> tuple[str, str]:
        await migrate(settings.database_url, timeout=settings.connect_timeout_seconds)
        async with await connect(settings.database_url) as conn:
            issued = await issue_token(
                conn,
                role=chosen,
                name=name,
                secret=settings.token_secret.get_secret_value(),
                ttl=lifetime,
            )
        expiry = issued.expires_at.isoformat() if issued.expires_at else "never"
        return issued.token, expiry

    try:
        token, expiry = asyncio.run(create())
    except DatabaseUnavailable as error:
        raise _fail(str(error)) from None
    print(f"created a {chosen.name} token named {name!r}, expires {expiry}", file=sys.stderr)
    print(token)


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str | None, typer.Option(help="Revoke every token with this name.")] = None,
    token: Annotated[str | None, typer.Option(help="Revoke this token.")] = None,
) -> None:
    """Revoke tokens by name or by value; a running API refuses them within
    KAIROS_API_TOKEN_CACHE_SECONDS (30 s by default)."""
    from api.tokens import revoke_token
    from kairos.db import DatabaseUnavailable, connect

    if (name is None) == (token is None):
        raise _fail("give exactly one of --name or --token")
    settings = _settings()

    async def revoke() -> int:
        async with await connect(settings.database_url) as conn:
            return await revoke_token(conn, name=name, token=token)

    try:
        revoked = asyncio.run(revoke())
    except DatabaseUnavailable as error:
        raise _fail(str(error)) from None
    print(f"revoked {revoked} token(s)")
    if not revoked:
        raise typer.Exit(code=1)


# --- generic schedules ------------------------------------------------------------------


def _publish_schedule_event(kind: str, name: str, **fields: object) -> None:
    """Publish one schedule.* event keyed by `name` (the schedule id) and print its id."""
    import uuid
    from datetime import UTC, datetime

    from pydantic import TypeAdapter, ValidationError

    from api.errors import KafkaUnavailable
    from api.publisher import Publisher
    from schemas.schedules import ScheduleEvent

    settings = _settings()
    values = {
        "type": kind,
        "event_id": str(uuid.uuid4()),
        "occurred_at": datetime.now(UTC).isoformat(),
        "actor": "cli",
        "schedule_id": name,
        **fields,
    }
    try:
        event = TypeAdapter(ScheduleEvent).validate_python(values)
    except ValidationError as error:
        raise _fail(f"invalid {kind}: {error.errors(include_url=False)[0]['msg']}") from None

    async def send() -> str:
        publisher = Publisher(settings, timeout=settings.connect_timeout_seconds)
        try:
            receipt = await publisher.publish(event)
        finally:
            await publisher.stop()
        return str(receipt.event_id)

    try:
        event_id = asyncio.run(send())
    except KafkaUnavailable as error:
        raise _fail(str(error)) from None
    print(f"{kind} published for {name!r}: event {event_id}")


def _schedule_rows(name: str | None) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    from api import queries
    from kairos.db import DatabaseUnavailable, connect

    settings = _settings()

    async def read() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        async with await connect(settings.database_url) as conn:
            if name is None:
                rows, _ = await queries.list_schedules(conn, limit=1000, offset=0)
                return rows, []
            row = await queries.get_schedule(conn, name=name)
            if row is None:
                return [], []
            runs, _ = await queries.list_schedule_runs(
                conn, schedule_id=str(row["schedule_id"]), limit=20
            )
            return [row], runs

    try:
        return asyncio.run(read())
    except DatabaseUnavailable as error:
        raise _fail(str(error)) from None


@schedules_app.command("list")
def schedules_list() -> None:
    """Every schedule: name, status, next fire time and run counts."""
    rows, _ = _schedule_rows(None)
    for row in rows:
        print(
            f"{row['name']}\t{row['status']}\tnext={row['next_fire_at']}"
            f"\truns={row['runs']}\tskipped={row['skipped_runs']}\tfailed={row['failed_runs']}"
        )


@schedules_app.command("show")
def schedules_show(name: str) -> None:
    """One schedule as JSON: its definition, state and latest runs."""
    import json

    rows, runs = _schedule_rows(name)
    if not rows:
        raise _fail(f"no schedule named {name!r}")
    print(json.dumps({**rows[0], "recent_runs": runs}, indent=2, default=str))


@schedules_app.command("create")
def schedules_create(
    file: Annotated[Path, typer.Option("--file", help="A JSON schedule definition.")],
) -> None:
    """Create (or replace) a schedule from a JSON file; its `name` becomes its id."""
    import json

    from pydantic import ValidationError

    from kairos.recurrence import schedule_problem
    from schemas.schedules import Schedule

    try:
        definition = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise _fail(f"cannot read {file}: {error}") from None
    if not isinstance(definition, dict):
        raise _fail(f"{file} must hold one JSON object")
    try:
        schedule = Schedule.model_validate({**definition, "id": definition.get("name")})
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "schedule"
        raise _fail(f"invalid schedule: {where}: {first['msg']}") from None
    problem = schedule_problem(schedule)
    if problem:
        raise _fail(f"invalid schedule: recurrence: {problem}")
    _publish_schedule_event(
        "schedule.upserted", schedule.id, schedule=schedule.model_dump(mode="json")
    )


@schedules_app.command("enable")
def schedules_enable(name: str) -> None:
    """Turn a disabled schedule on."""
    _publish_schedule_event("schedule.enabled", name)


@schedules_app.command("disable")
def schedules_disable(name: str) -> None:
    """Turn a schedule off."""
    _publish_schedule_event("schedule.disabled", name)


@schedules_app.command("pause")
def schedules_pause(
    name: str, note: Annotated[str | None, typer.Option(help="Why it is paused.")] = None
) -> None:
    """Hold a schedule's occurrences back until it is resumed."""
    _publish_schedule_event("schedule.paused", name, note=note)


@schedules_app.command("resume")
def schedules_resume(name: str) -> None:
    """Resume a paused schedule (missed occurrences follow its catch-up policy)."""
    _publish_schedule_event("schedule.resumed", name)


@schedules_app.command("trigger")
def schedules_trigger(name: str) -> None:
    """Run a schedule now."""
    _publish_schedule_event("schedule.triggered", name)


@schedules_app.command("delete")
def schedules_delete(name: str) -> None:
    """Delete a schedule (the worker refuses system schedules)."""
    _publish_schedule_event("schedule.deleted", name)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
