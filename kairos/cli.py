"""`kairos`: the operator interface. Other tools script against these commands."""

from __future__ import annotations

import asyncio
import logging
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kairos.settings import Settings

app = typer.Typer(help="Kairos: an event-sourced scan scheduler on Kafka streams.", no_args_is_help=True)
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


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


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply pending read-model migrations (idempotent)."""
    from kairos.db import DatabaseUnavailable, migrate

    settings = _settings()
    try:
        applied = asyncio.run(migrate(settings.database_url, timeout=settings.connect_timeout_seconds))
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
        raise _fail(f"unknown role {role!r}; choose one of {', '.join(r.name for r in Role)}") from None
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
