"""`kairos`: the operator interface. Other tools script against these commands."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kairos.settings import Settings

app = typer.Typer(
    help="Kairos: an event-sourced scan scheduler on Kafka streams.", no_args_is_help=True
)
db_app = typer.Typer(help="Read-model database.", no_args_is_help=True)
token_app = typer.Typer(help="API bearer tokens.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")

log = logging.getLogger("kairos")


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
) -> None:
    """Create an API token; the last line printed is the token alone."""
    from api.tokens import create_token
    from kairos.db import DatabaseUnavailable, connect, migrate
    from schemas.api import Role

    try:
        chosen = Role[role.upper()]
    except KeyError:
        raise _fail(
            f"unknown role {role!r}; choose one of {', '.join(r.name for r in Role)}"
        ) from None
    settings = _settings()

    async def create() -> str:
        await migrate(settings.database_url, timeout=settings.connect_timeout_seconds)
        async with await connect(settings.database_url) as conn:
            return await create_token(conn, role=chosen, name=name)

    try:
        token = asyncio.run(create())
    except DatabaseUnavailable as error:
        raise _fail(str(error)) from None
    print(f"created a {chosen.name} token named {name!r}", file=sys.stderr)
    print(token)


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str | None, typer.Option(help="Revoke every token with this name.")] = None,
    token: Annotated[str | None, typer.Option(help="Revoke this token.")] = None,
) -> None:
    """Revoke tokens by name or by value; takes effect on the next request."""
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
