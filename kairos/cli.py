"""`kairos`: the operator interface. Other tools script against these commands."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kairos import eventscli, opscli, scannercli
from kairos.agent_cli import agent_app
from kairos.floor.collection import pace_for_streaming
from kairos.floor.memory import keep_returning_freed_memory
from kairos.floor.settings import Settings

if TYPE_CHECKING:
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.projection.runner import Projector

app = typer.Typer(
    help="Kairos: an event-sourced scan scheduler on Kafka streams.", no_args_is_help=True
)
db_app = typer.Typer(help="Read-model database.", no_args_is_help=True)
token_app = typer.Typer(help="API bearer tokens.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
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


def prepare_dependencies(settings: Settings, *, topics: bool) -> bool:
    """Check Kafka and PostgreSQL, create topics, apply migrations; exit clearly on failure.

    Also records which Kafka cluster the read model projects; True if the read model had
    been built from another one and was cleared to be rebuilt.
    """
    from kairos.floor.db import DatabaseUnavailable, bind_event_store, migrate
    from streams.admin import KafkaUnavailable, TopicLayoutMismatch, admin_client, ensure_topics

    async def prepare() -> bool:
        if topics:
            await ensure_topics(settings)
        cluster_id = await _kafka_cluster_id(await admin_client(settings))
        await migrate(settings.database_url, timeout=settings.connect_timeout_seconds)
        if cluster_id is None:
            return False
        return await bind_event_store(
            settings.database_url,
            cluster_id=cluster_id,
            bootstrap_servers=settings.kafka_bootstrap_servers,
            timeout=settings.connect_timeout_seconds,
        )

    try:
        return asyncio.run(asyncio.wait_for(prepare(), settings.connect_timeout_seconds * 3))
    except (KafkaUnavailable, DatabaseUnavailable, TopicLayoutMismatch) as error:
        raise _fail(str(error)) from None
    except TimeoutError:
        raise _fail(
            f"gave up reaching Kafka at {settings.kafka_bootstrap_servers} or PostgreSQL "
            "within the connect timeout"
        ) from None


async def _kafka_cluster_id(client: AIOKafkaAdminClient) -> str | None:
    """The cluster id the broker reports (None if it reports none), closing `client`."""
    from aiokafka.errors import KafkaError

    try:
        described = await client.describe_cluster()
    except (KafkaError, TimeoutError, OSError) as error:
        log.warning("Kafka did not describe its cluster (%s); read model not bound", error)
        return None
    finally:
        await client.close()
    cluster_id = described.get("cluster_id")
    return str(cluster_id) if cluster_id else None


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
    pace_for_streaming()
    keep_returning_freed_memory()
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
    from kairos.floor.clock import clock_for_speed
    from streams.projection.runner import Projector

    # The clock a worker builds, so projection_progress lag is measured in scheduler time.
    clock = clock_for_speed(settings.clock_speed, settings.clock_origin, settings.clock_start)
    projector = Projector(settings, clock)
    pace_for_streaming()
    keep_returning_freed_memory()
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
        from kairos.floor.prometheus import Registry
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


class _StopRequested(Exception):
    """SIGINT, SIGTERM or SIGHUP reached `kairos dev`: stop every child."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _StopRequested(signal.Signals(signum).name)


@app.command()
def dev(
    broker: Annotated[BrokerChoice, typer.Option(help="Which broker to run.")] = BrokerChoice.AUTO,
    reset: Annotated[bool, typer.Option(help="Wipe the local event store and read model.")] = False,
    port: Annotated[
        int | None,
        typer.Option(help="API port (default: the last one used here if free, else 8000)."),
    ] = None,
    home: Annotated[Path, typer.Option(help="Project-local data folder.")] = Path(".kairos"),
    agents: Annotated[
        int,
        typer.Option(
            min=0, max=16, help="Simulated compliance scanners to run (`kairos agent simulate`)."
        ),
    ] = 0,
) -> None:
    """Run the whole stack locally: broker, PostgreSQL, worker and API. Ctrl-C stops it.

    Writes HOME/dev.env, which every `kairos` command under this folder reads, and holds
    HOME/dev.lock: one `kairos dev` per folder. SIGINT, SIGTERM and SIGHUP stop every child.
    """
    from kairos import devenv, devstack
    from kairos.localstack.errors import LocalStackError

    home = home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    lock = devenv.DevLock(home)
    try:
        lock.acquire()
    except devenv.AlreadyRunning as error:
        raise _fail(str(error)) from None
    # SIGINT too: a shell starts background jobs with SIGINT ignored, so `kill -INT` would
    # otherwise do nothing to a `kairos dev &`.
    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop_signal, _raise_stop)
    stack = devstack.DevStack(home=home)
    started = time.monotonic()

    def stage(text: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {text}", flush=True)

    try:
        stage("starting the broker (the first run fetches Apache Kafka's jars)...")
        servers = devstack.start_broker(stack, broker.value, reset=reset)
        stage(f"broker: {stack.broker_name}")
        memory_only = stack.broker_name.startswith("tansu")
        stage("starting PostgreSQL...")
        dsn = devstack.start_database(stack, clean=reset or memory_only)
        api_port = port or devenv.stable_port(home, "api", 8000)
        stack.ports["api"] = api_port
        devenv.remember_ports(home, {**devenv.remembered_ports(home), **stack.ports})
        settings = _settings().model_copy(
            update={
                "kafka_bootstrap_servers": servers,
                "database_url": dsn,
                "kafka_idempotence": not memory_only,
                "partitions": 4,
                "api_port": api_port,
            }
        )
        stage("creating topics and applying migrations...")
        if prepare_dependencies(settings, topics=True):
            stage("the read model projected another Kafka cluster: cleared, it rebuilds now")
        previous = _previous_dev_token(home)
        token = devstack.dev_admin_token(settings, previous)
        env = devstack.child_env(settings)
        url = f"http://127.0.0.1:{api_port}"
        values = {
            "KAFKA_BOOTSTRAP_SERVERS": servers,
            "DATABASE_URL": dsn,
            "KAIROS_KAFKA_IDEMPOTENCE": str(settings.kafka_idempotence).lower(),
            "KAIROS_PARTITIONS": str(settings.partitions),
            devenv.API_URL_VAR: url,
            devenv.TOKEN_VAR: token,
        }
        dev_env = devenv.write_dev_env(home, values)
        stage("starting the worker and the API...")
        worker_log = devstack.spawn(
            stack, "worker", ["worker", "--workdir", str(home / "worker")], env
        )
        devstack.spawn(stack, "api", ["api", "--host", "127.0.0.1", "--port", str(api_port)], env)
        if not devstack.wait_http_ok(f"{url}/healthz", timeout=60):
            raise _fail(f"the API did not come up; see {home / 'api.log'}")
        stage("API up; waiting for the worker to join its group and recover its tables...")
        if (
            not devstack.wait_for_log_line(
                stack, "worker", devstack.WORKER_READY_LINE, start=worker_log, timeout=120
            )
            and stack.first_dead() is None
        ):
            stage(f"the worker is not ready after 120 s; carrying on (see {home / 'worker.log'})")
        if agents:
            stage(f"starting {agents} simulated scanner agent(s)...")
            devstack.spawn(stack, "agents", ["agent", "simulate", "--agents", str(agents)], env)
        lock.describe(
            {
                "pid": os.getpid(),
                "state": "running",
                "api_url": url,
                "kafka": servers,
                "database": _redacted(dsn),
                "children": stack.children(),
            }
        )
        stage("ready")
        print(f"Broker:     {stack.broker_name} - {stack.broker_note}")
        print(f"Read model: {_redacted(dsn)}")
        print(f"API:        {url}  (docs at {url}/docs)")
        logs = ", ".join(f"{home}/{name}.log" for name, _ in stack.processes)
        print(f"Logs:       {logs}")
        print(f"Settings:   {dev_env} (read by every `kairos` command under {home.parent});")
        print("            for other tools, paste these lines in a shell:")
        for line in devenv.export_lines(values):
            print(line)
        print("Development admin token (Authorization: Bearer ...):")
        print(token, flush=True)
        print("Ctrl-C stops everything.", flush=True)
        while (dead := stack.first_dead()) is None:
            time.sleep(0.5)
        name, log_file = dead
        print(
            f"kairos: {name} stopped unexpectedly (see {log_file}); stopping everything",
            file=sys.stderr,
            flush=True,
        )
        raise typer.Exit(code=1)
    except (KeyboardInterrupt, _StopRequested) as stop:
        print(f"stopping ({stop or 'SIGINT'})...", flush=True)
    except LocalStackError as error:
        raise _fail(str(error)) from None
    finally:
        for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(stop_signal, signal.SIG_IGN)
        stack.stop()
        lock.release()
        print("stopped", flush=True)


def _previous_dev_token(home: Path) -> str | None:
    from kairos import devenv

    path = home / devenv.DEV_ENV_FILE
    if not path.is_file():
        return None
    return devenv.read_env_file(path).get(devenv.TOKEN_VAR)


def _redacted(dsn: str) -> str:
    from kairos.floor.db import redact

    return redact(dsn)


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply pending read-model migrations (idempotent)."""
    from kairos.floor.db import DatabaseUnavailable, migrate

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
    from kairos.floor.db import DatabaseUnavailable, connect, migrate
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
                actor=_cli_actor(),
            )
        expiry = issued.expires_at.isoformat() if issued.expires_at else "never"
        return issued.token, expiry

    try:
        token, expiry = asyncio.run(create())
    except DatabaseUnavailable as error:
        raise _fail(str(error)) from None
    print(f"created a {chosen.name} token named {name!r}, expires {expiry}", file=sys.stderr)
    print(token)


def _cli_actor() -> str:
    """Who the audit names for a token made or revoked from this command line."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):
        return "cli"


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str | None, typer.Option(help="Revoke every token with this name.")] = None,
    token: Annotated[str | None, typer.Option(help="Revoke this token.")] = None,
) -> None:
    """Revoke tokens by name or by value; a running API refuses them within
    KAIROS_API_TOKEN_CACHE_SECONDS (30 s by default)."""
    from api.tokens import revoke_token
    from kairos.floor.db import DatabaseUnavailable, connect, migrate

    if (name is None) == (token is None):
        raise _fail("give exactly one of --name or --token")
    settings = _settings()

    async def revoke() -> int:
        await migrate(settings.database_url, timeout=settings.connect_timeout_seconds)
        async with await connect(settings.database_url) as conn:
            return await revoke_token(conn, name=name, token=token, actor=_cli_actor())

    try:
        revoked = asyncio.run(revoke())
    except DatabaseUnavailable as error:
        raise _fail(str(error)) from None
    print(f"revoked {revoked} token(s)")
    if not revoked:
        raise typer.Exit(code=1)


@app.callback()
def _read_dev_env(ctx: typer.Context) -> None:
    """Kairos: an event-sourced scan scheduler on Kafka streams."""
    # `kairos dev` writes the file; every other command reads it unless the environment
    # names a stack of its own, so a second shell needs no exports.
    if ctx.invoked_subcommand != "dev":
        from kairos.devenv import apply_dev_env

        apply_dev_env()


opscli.register(app)
scannercli.register(app)
eventscli.register(app)
# `kairos commands list` (through the API) beside `kairos commands tail` (from Kafka).
eventscli.commands_app.command("list")(opscli.commands_list)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
