"""`kairos scanners`: the scanner registry through the API (list, show, set).

`set` registers a scanner the registry lacks (PUT: the options given, defaults for the rest)
and changes only the options given of one it has (PATCH), `compliance` included: its first
change stores its implicit entry (the config's cap, timeout and retry delay) with the change.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kairos.client import ApiError
from kairos.opscli import (
    SCHEDULER,
    JsonOpt,
    TokenOpt,
    WaitOpt,
    _accepted,
    _path,
    _print_json,
    api_errors,
    client,
    fields,
    table,
)

SCANNERS = f"{SCHEDULER}/scanners"

scanners_app = typer.Typer(
    help="The scanner registry: each scanner's pool, timeout, retry delay, default priority"
    " and switch (an inactive scanner's commands are held)."
)

COLUMNS = [
    ("NAME", "name"),
    ("ACTIVE", "is_active"),
    ("IN FLIGHT", "in_flight"),
    ("POOL", "max_concurrent"),
    ("TIMEOUT S", "timeout_seconds"),
    ("RETRY S", "retry_delay_seconds"),
    ("PRIORITY", "default_priority"),
    ("DESCRIPTION", "description"),
]


def register(app: typer.Typer) -> None:
    scanners_app.info.no_args_is_help = True
    app.add_typer(scanners_app, name="scanners")


def _line(entry: dict[str, Any]) -> str:
    state = "active" if entry["is_active"] else "inactive (its commands are held)"
    return (
        f"{entry['name']}: {state}, pool {entry['max_concurrent']},"
        f" timeout {entry['timeout_seconds']} s, retry delay {entry['retry_delay_seconds']} s,"
        f" default priority {entry['default_priority']}"
    )


@scanners_app.command("list")
def scanners_list(token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Every registered scanner, compliance first, with its commands in flight."""
    with api_errors():
        answer = client(token).get(SCANNERS)
    if as_json:
        _print_json(answer)
    else:
        table(answer["data"], COLUMNS)


@scanners_app.command("show")
def scanners_show(name: str, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """One scanner's entry."""
    with api_errors():
        answer = client(token).get(f"{SCANNERS}/{_path(name)}")
    if as_json:
        _print_json(answer)
    else:
        fields(answer)


@scanners_app.command("set")
def scanners_set(
    name: str,
    max_concurrent: Annotated[
        int | None, typer.Option("--max-concurrent", help="Its pool: commands in flight at most.")
    ] = None,
    timeout: Annotated[
        int | None, typer.Option("--timeout", help="Seconds before a command without a result.")
    ] = None,
    retry_delay: Annotated[
        int | None, typer.Option("--retry-delay", help="Seconds before a failed run is retried.")
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option("--priority", help="Default priority (1-10) of commands naming none."),
    ] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    active: Annotated[
        bool | None,
        typer.Option(
            "--active/--inactive", help="Switch it on, or off (its commands are then held)."
        ),
    ] = None,
    wait: WaitOpt = True,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register a scanner, or change the options given of a registered one (SECURITY_ADMIN)."""
    given = {
        "max_concurrent": max_concurrent,
        "timeout_seconds": timeout,
        "retry_delay_seconds": retry_delay,
        "default_priority": priority,
        "description": description,
        "is_active": active,
    }
    body = {key: value for key, value in given.items() if value is not None}
    api = client(token)
    path = f"{SCANNERS}/{_path(name)}"
    with api_errors():
        try:
            api.get(path)
            registered = True
        except ApiError as error:
            if error.status != 404:
                raise
            registered = False
        method = "PATCH" if registered else "PUT"
        answer = api.request(method, path, body=body, query={"wait": wait or None})
    _accepted(answer, as_json, _line)
