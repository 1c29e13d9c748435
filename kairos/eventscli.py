"""See and send Kairos messages without code: `kairos events publish`, `kairos commands tail`.

These talk to Kafka directly (as producers and scanner agents do), with the settings every
`kairos` command reads (environment, else `.kairos/dev.env`). A message is validated against
the contract in `schemas/` before anything is sent: one invalid message sends none.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError

from kairos.client import EXIT_INVALID, EXIT_UNAVAILABLE
from kairos.floor.settings import Settings
from schemas import topics
from schemas.changes import ScheduleChange
from schemas.commands import ScanCommand
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted

events_app = typer.Typer(help="Publish messages to Kairos' input topics.", no_args_is_help=True)
commands_app = typer.Typer(help="Follow the scan commands Kairos issues.", no_args_is_help=True)

PUBLISHABLE: dict[str, Any] = {
    topics.OBJECT_CREATED: ObjectEvent,
    topics.SCHEDULE_CHANGES: ScheduleChange,
    topics.SCAN_COMPLETED: ScanCompleted,
}
"""Input topics and their contract; Kairos alone writes scan-commands, dead-letters, alerts."""


def register(app: typer.Typer) -> None:
    app.add_typer(events_app, name="events")
    app.add_typer(commands_app, name="commands")


def _err(text: str) -> None:
    sys.stderr.write(f"kairos: {text}\n")


def _settings() -> Settings:
    try:
        return Settings()
    except ValueError as error:
        _err(f"invalid settings: {error}")
        raise typer.Exit(code=EXIT_UNAVAILABLE) from None


def parse_messages(text: str, source: str) -> list[dict[str, Any]]:
    """One JSON object, a JSON array of objects, or JSON lines."""
    stripped = text.strip()
    try:
        if stripped.startswith("["):
            loaded = json.loads(stripped)
        else:
            try:
                loaded = [json.loads(stripped)]
            except ValueError:
                loaded = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    except ValueError as error:
        raise ValueError(f"{source}: not JSON: {error}") from None
    if not loaded or not all(isinstance(item, dict) for item in loaded):
        raise ValueError(f"{source}: give one JSON object, an array of objects, or JSON lines")
    return loaded


def validate_message(topic: str, raw: dict[str, Any]) -> tuple[Any, str]:
    """The contract model for `raw` on `topic` and its record key, or ValueError naming the
    field. A missing `event_id` gets a fresh one (every message needs an idempotency key)."""
    from api.publisher import key_of

    model = PUBLISHABLE[topic]
    values = {"event_id": str(uuid.uuid4()), **raw}
    try:
        message = TypeAdapter(model).validate_python(values)
    except ValidationError as error:
        problems = []
        for item in error.errors(include_url=False):
            where = ".".join(str(part) for part in item["loc"]) or "message"
            problems.append(f"{where}: {item['msg']}")
        raise ValueError("; ".join(problems)) from None
    if isinstance(message, ObjectEvent):
        return message, message.object_id
    if isinstance(message, ScanCompleted):
        return message, message.host_id
    return message, key_of(message)


@events_app.command("publish")
def events_publish(
    topic: Annotated[str, typer.Argument(help="object-created, scan-completed, schedule-changes")],
    file: Annotated[str, typer.Argument(help="JSON: object, array or lines; - = stdin.")] = "-",
) -> None:
    """Validate messages against the contract, then publish them (keyed as Kairos expects).

    Exit codes: 0 sent, 6 a message is invalid (nothing sent), 2 Kafka unreachable.
    """
    if topic not in PUBLISHABLE:
        _err(f"cannot publish to {topic!r}; choose one of {', '.join(PUBLISHABLE)}")
        raise typer.Exit(code=EXIT_INVALID)
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        raws = parse_messages(text, "stdin" if file == "-" else file)
    except (OSError, ValueError) as error:
        _err(str(error))
        raise typer.Exit(code=EXIT_INVALID) from None
    messages = []
    for index, raw in enumerate(raws):
        try:
            messages.append(validate_message(topic, raw))
        except ValueError as error:
            which = f"message {index + 1}: " if len(raws) > 1 else ""
            _err(f"invalid {topic} {which}{error}; nothing was sent")
            raise typer.Exit(code=EXIT_INVALID) from None
    settings = _settings()
    try:
        asyncio.run(_send(settings, getattr(settings.topics, topic.replace("-", "_")), messages))
    except ConnectionError as error:
        _err(str(error))
        raise typer.Exit(code=EXIT_UNAVAILABLE) from None
    for message, key in messages:
        sys.stdout.write(f"published to {topic} (key {key}): event {message.event_id}\n")


async def _send(settings: Settings, topic: str, messages: list[tuple[Any, str]]) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    from kairos.floor.kafka_reach import quiet_aiokafka

    timeout = settings.connect_timeout_seconds
    producer = AIOKafkaProducer(
        **settings.kafka_client_options(),
        acks="all",
        enable_idempotence=settings.kafka_idempotence,
        request_timeout_ms=int(timeout * 1000),
    )
    where = f"Kafka at {settings.kafka_bootstrap_servers}"
    try:
        with quiet_aiokafka():
            await asyncio.wait_for(producer.start(), timeout)
    except (TimeoutError, KafkaError, OSError) as error:
        await _close(producer.stop())
        raise ConnectionError(f"{where} is not reachable: {await _why(settings, error)}") from None
    try:
        for message, key in messages:
            await asyncio.wait_for(
                producer.send_and_wait(topic, message.model_dump_json().encode(), key=key.encode()),
                timeout,
            )
    except (TimeoutError, KafkaError, OSError) as error:
        raise ConnectionError(
            f"{where} did not acknowledge on {topic}: {type(error).__name__}"
        ) from None
    finally:
        await _close(producer.stop())


async def _why(settings: Settings, error: BaseException) -> str:
    """What stopped a client from starting: a refused password or certificate is named."""
    from kairos.floor.kafka_reach import kafka_failure_reason

    if isinstance(error, TimeoutError):
        return type(error).__name__
    return await kafka_failure_reason(settings, settings.connect_timeout_seconds)


async def _close(stopping: Any) -> None:
    try:
        await asyncio.wait_for(stopping, 5)
    except Exception:  # noqa: BLE001 - a client that failed to start may fail to stop
        pass


COMMAND_FIELDS = ("issued_at", "host_id", "scanner", "reason", "priority", "attempt", "command_id")


@commands_app.command("tail")
def commands_tail(
    scanner: Annotated[str | None, typer.Option(help="Only commands for this scanner.")] = None,
    from_beginning: Annotated[
        bool, typer.Option(help="Start at the oldest command kept, not at new ones.")
    ] = False,
    max_commands: Annotated[
        int | None, typer.Option("--max", help="Stop after this many commands.")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Stop after this many seconds (exit 0).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON command per line.")] = False,
) -> None:
    """Follow `scan-commands` live, one line per command (Ctrl-C stops).

    Reads without a consumer group: it takes no command from an agent.
    """
    settings = _settings()
    try:
        asyncio.run(_tail(settings, scanner, from_beginning, max_commands, timeout, as_json))
    except ConnectionError as error:
        _err(str(error))
        raise typer.Exit(code=EXIT_UNAVAILABLE) from None
    except KeyboardInterrupt:
        raise typer.Exit(code=0) from None


async def _tail(
    settings: Settings,
    scanner: str | None,
    from_beginning: bool,
    max_commands: int | None,
    timeout: float | None,
    as_json: bool,
) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    from kairos.floor.kafka_reach import quiet_aiokafka

    topic = settings.topics.scan_commands
    consumer = AIOKafkaConsumer(
        topic,
        **settings.kafka_client_options(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
        request_timeout_ms=int(settings.connect_timeout_seconds * 1000),
    )
    try:
        with quiet_aiokafka():
            await asyncio.wait_for(consumer.start(), settings.connect_timeout_seconds)
    except (TimeoutError, KafkaError, OSError) as error:
        await _close(consumer.stop())
        raise ConnectionError(
            f"Kafka is not reachable at {settings.kafka_bootstrap_servers}: "
            f"{await _why(settings, error)}"
        ) from None
    deadline = None if timeout is None else time.monotonic() + timeout
    shown = 0
    sys.stderr.write(f"following {topic}" + (f" for scanner {scanner}" if scanner else "") + "\n")
    sys.stderr.flush()
    if not as_json:
        _line([name.upper().replace("_", " ") for name in COMMAND_FIELDS])
    try:
        while max_commands is None or shown < max_commands:
            wait_ms = 500
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                wait_ms = int(min(500, left * 1000)) + 1
            batches = await consumer.getmany(timeout_ms=wait_ms)
            for records in batches.values():
                for record in records:
                    if max_commands is not None and shown >= max_commands:
                        break
                    if _show(record.value, scanner, as_json):
                        shown += 1
    finally:
        await _close(consumer.stop())


def _line(cells: list[str]) -> None:
    widths = (32, 20, 12, 9, 8, 7, 36)
    text = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
    sys.stdout.write(text.rstrip() + "\n")
    sys.stdout.flush()


def _show(raw: bytes | None, scanner: str | None, as_json: bool) -> bool:
    try:
        command = ScanCommand.model_validate_json(raw or b"")
    except ValidationError:
        sys.stderr.write(f"(undecodable record: {(raw or b'')[:200]!r})\n")
        return False
    if scanner is not None and command.scanner != scanner:
        return False
    if as_json:
        sys.stdout.write(command.model_dump_json() + "\n")
        sys.stdout.flush()
    else:
        data = command.model_dump(mode="json")
        _line([str(data[name]) for name in COMMAND_FIELDS])
    return True
