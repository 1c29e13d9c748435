"""Operator commands that go through the HTTP API, as kubectl does for Kubernetes.

Every command here is an API call: it sends the bearer token (`--token`, else `KAIROS_TOKEN`,
which `kairos dev` puts in `.kairos/dev.env`), so the API's roles apply, and it answers what
the API answered: tables by default, the API's JSON with `--json`, and an exit code per
status (see `kairos.client`): 0 ok, 2 unreachable/503, 3 401/403, 4 404, 5 409, 6 422.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from kairos.client import EXIT_FAILED, EXIT_INVALID, ApiClient, ApiError
from kairos.devenv import API_URL_VAR, DEFAULT_API_URL, TOKEN_VAR

SCHEDULER = "/api/compliance/scheduler"
JOBS = "/api/scheduled-jobs"
IMPORT_BATCH = 100
IMPORT_PARALLEL = 8

TokenOpt = Annotated[
    str | None,
    typer.Option("--token", help=f"Bearer token (default: ${TOKEN_VAR}, or .kairos/dev.env)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's JSON answer.")]
WaitOpt = Annotated[
    bool, typer.Option(help="Wait (up to 5 s) until the read model shows the change.")
]

hosts_app = typer.Typer(
    help="Hosts: add, import, list, show, force a scan, maintenance, deactivate, reactivate, "
    "delete."
)
config_app = typer.Typer(help="The scheduler configuration.")
schedules_app = typer.Typer(
    help="Generic schedules (cron, interval, RRULE, triggers). A schedule's name is its id."
)
dead_letters_app = typer.Typer(help="Messages Kairos could not accept.")
alerts_app = typer.Typer(help="Alerts: score drops, critical hosts, broken promises, the cap.")


def register(app: typer.Typer) -> None:
    """Add the API-client commands to the `kairos` application."""
    app.command("status")(status)
    app.command("workers")(workers)
    app.command("audit")(audit)
    for name, sub in (
        ("hosts", hosts_app),
        ("config", config_app),
        ("schedules", schedules_app),
        ("dead-letters", dead_letters_app),
        ("alerts", alerts_app),
    ):
        sub.info.no_args_is_help = True
        app.add_typer(sub, name=name)


# --- plumbing ----------------------------------------------------------------------------


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(f"kairos: {text}\n")


def client(token: str | None) -> ApiClient:
    url = os.environ.get(API_URL_VAR) or DEFAULT_API_URL
    return ApiClient(url, token or os.environ.get(TOKEN_VAR) or None)


@contextmanager
def api_errors() -> Iterator[None]:
    """An API error becomes one line on stderr and its exit code."""
    try:
        yield
    except ApiError as error:
        _err(str(error))
        raise typer.Exit(code=error.exit_code) from None


def _print_json(data: Any) -> None:
    _out(json.dumps(data, indent=2, default=str))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "-"
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> None:
    """Aligned columns, a header in capitals; `columns` are (header, key)."""
    cells = [[header for header, _ in columns]]
    cells += [[_cell(row.get(key)) for _, key in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        padded = (text.ljust(width) for text, width in zip(line, widths, strict=True))
        _out("  ".join(padded).rstrip())


def fields(data: dict[str, Any], keys: list[str] | None = None) -> None:
    """`key: value` lines, aligned."""
    chosen = keys or [key for key, value in data.items() if not isinstance(value, list)]
    width = max((len(key) for key in chosen), default=0)
    for key in chosen:
        _out(f"{key.ljust(width)}  {_cell(data.get(key))}")


def _accepted(answer: Any, as_json: bool, shown: Callable[[dict[str, Any]], str]) -> None:
    """A write's answer: 200 with the new state (wait=true) or 202 with the event id."""
    if as_json:
        _print_json(answer)
    elif isinstance(answer, dict) and answer.get("status") == "accepted":
        _out(f"accepted: event {answer['event_id']} (not yet shown by the read model)")
    else:
        _out(shown(answer))


def _path(*parts: str) -> str:
    return "/".join(quote(part, safe="") for part in parts)


# --- status ------------------------------------------------------------------------------


def status(token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The scheduler at a glance: hosts by state, in flight, overdue, due soon, lag."""
    with api_errors():
        answer = client(token).get(f"{SCHEDULER}/status")
    if as_json:
        _print_json(answer)
        return
    fields({key: value for key, value in answer.items() if key != "by_state"})
    by_state = answer.get("by_state") or {}
    if by_state:
        _out("by state:")
        for state, count in sorted(by_state.items()):
            _out(f"  {state.ljust(18)}{count}")


# --- hosts -------------------------------------------------------------------------------

HOST_COLUMNS = [
    ("HOST", "host_id"),
    ("STATE", "state"),
    ("SCORE", "score"),
    ("NEXT SCAN", "next_scheduled_scan"),
    ("IN FLIGHT", "in_flight_command_id"),
    ("MAINT", "maintenance_mode"),
    ("ACTIVE", "is_active"),
    ("STATUS", "status"),
]


def _labels(items: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _err(f"--label wants key=value, not {item!r}")
            raise typer.Exit(code=EXIT_INVALID)
        labels[key] = value
    return labels


@hosts_app.command("add")
def hosts_add(
    host_id: Annotated[str, typer.Argument(help="The host's id (the object id).")],
    hostname: Annotated[str | None, typer.Option(help="DNS name.")] = None,
    ip: Annotated[str | None, typer.Option(help="Address.")] = None,
    os_name: Annotated[str | None, typer.Option("--os", help="Operating system.")] = None,
    organization: Annotated[str | None, typer.Option(help="Owning organization.")] = None,
    label: Annotated[list[str] | None, typer.Option(help="key=value; repeatable.")] = None,
    inactive: Annotated[bool, typer.Option(help="Known but not to be scanned.")] = False,
    wait: WaitOpt = True,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add one host; it is scanned at once (needs SECURITY_ADMIN)."""
    body: dict[str, Any] = {"host_id": host_id, "labels": _labels(label)}
    for key, value in (("hostname", hostname), ("ip", ip), ("os", os_name)):
        if value is not None:
            body[key] = value
    if organization is not None:
        body["organization"] = organization
    if inactive:
        body["is_active"] = False
    with api_errors():
        answer = client(token).post(f"{SCHEDULER}/hosts", body, wait=wait or None)
    _accepted(answer, as_json, lambda host: f"added {host['host_id']}: state {host['state']}")


def read_hosts_file(path: str) -> list[dict[str, Any]]:
    """Hosts from a JSON array, JSON lines, or CSV with a header (`labels` as k=v;k=v)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        _err(f"cannot read {path}: {error}")
        raise typer.Exit(code=EXIT_FAILED) from None
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            items = json.loads(text)
        elif stripped.startswith("{"):
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            items = [_csv_host(row) for row in csv.DictReader(io.StringIO(text))]
    except ValueError as error:
        _err(f"{path}: not a JSON array, JSON lines or CSV with a header: {error}")
        raise typer.Exit(code=EXIT_INVALID) from None
    if not all(isinstance(item, dict) for item in items):
        _err(f"{path}: every host must be an object")
        raise typer.Exit(code=EXIT_INVALID)
    return items


def _csv_host(row: dict[str, str]) -> dict[str, Any]:
    host: dict[str, Any] = {key: value for key, value in row.items() if key and value != ""}
    if "labels" in host:
        host["labels"] = dict(
            pair.split("=", 1) for pair in str(host["labels"]).split(";") if "=" in pair
        )
    if "is_active" in host:
        host["is_active"] = str(host["is_active"]).lower() in ("1", "true", "yes")
    return host


@hosts_app.command("import")
def hosts_import(
    file: Annotated[str, typer.Argument(help="JSON array, JSON lines or CSV; - for stdin.")],
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add many hosts: one POST per host, in batches of 100, 8 at a time.

    Each host is validated by the API on its own, so one bad line does not stop the others
    (`POST /hosts:import` would refuse the whole file). Exit code: that of the first refusal,
    0 if none.
    """
    hosts = read_hosts_file(file)
    api = client(token)

    def add(host: dict[str, Any]) -> tuple[str, ApiError | None]:
        try:
            api.post(f"{SCHEDULER}/hosts", host)
        except ApiError as error:
            return str(host.get("host_id")), error
        return str(host.get("host_id")), None

    results: list[tuple[str, ApiError | None]] = []
    with ThreadPoolExecutor(IMPORT_PARALLEL) as pool:
        for start in range(0, len(hosts), IMPORT_BATCH):
            results += pool.map(add, hosts[start : start + IMPORT_BATCH])
            unreachable = [error for _, error in results if error and error.status == 0]
            if unreachable:
                _err(str(unreachable[0]))
                raise typer.Exit(code=unreachable[0].exit_code)
    refused = [(host_id, error) for host_id, error in results if error is not None]
    if as_json:
        _print_json(
            {
                "added": len(results) - len(refused),
                "refused": [
                    {"host_id": h, "status": e.status, "detail": e.detail, "errors": e.errors}
                    for h, e in refused
                ],
            }
        )
    else:
        _out(f"added {len(results) - len(refused)} of {len(results)} hosts")
        for host_id, error in refused:
            _err(f"{host_id}: {error}")
    if refused:
        raise typer.Exit(code=refused[0][1].exit_code)


DEMO_ORGANIZATIONS = ("acme", "globex", "initech")
DEMO_ENVIRONMENTS = ("prod", "staging", "dev")
DEMO_TEAMS = ("blue", "green", "red", "gold")


def demo_hosts(count: int, prefix: str) -> list[dict[str, Any]]:
    """`count` plausible hosts, the same ones on every call: `prefix`0001, `prefix`0002, …"""
    width = max(4, len(str(count)))
    hosts = []
    for number in range(1, count + 1):
        host_id = f"{prefix}{number:0{width}d}"
        hosts.append(
            {
                "id": host_id,
                "hostname": f"{host_id}.example.test",
                "organization": DEMO_ORGANIZATIONS[number % len(DEMO_ORGANIZATIONS)],
                "labels": {
                    "env": DEMO_ENVIRONMENTS[number % len(DEMO_ENVIRONMENTS)],
                    "team": DEMO_TEAMS[number % len(DEMO_TEAMS)],
                    "demo": "true",
                },
            }
        )
    return hosts


@hosts_app.command("demo")
def hosts_demo(
    count: Annotated[int, typer.Argument(min=1, max=10_000, help="How many hosts.")] = 50,
    prefix: Annotated[str, typer.Option(help="Host ids are PREFIX0001, PREFIX0002, ...")] = "demo-",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add COUNT demo hosts in one import (label demo=true); their first scans are due at once.

    They are ordinary hosts: their states change when a scanner agent answers their commands
    (`kairos dev --agents 1` runs a simulated one). Running it again updates the same hosts.
    """
    with api_errors():
        answer = client(token).post(f"{SCHEDULER}/hosts:import", demo_hosts(count, prefix))
    if as_json:
        _print_json(answer)
        return
    _out(f"published {answer['hosts']} demo hosts ({prefix}...); their first scans are due now")
    _out("their states change as a scanner agent answers: `kairos dev --agents 1` runs one")


@hosts_app.command("list")
def hosts_list(
    state: Annotated[str | None, typer.Option(help="Only hosts in this state.")] = None,
    maintenance: Annotated[
        bool | None, typer.Option("--maintenance/--no-maintenance", help="In maintenance or not.")
    ] = None,
    overdue: Annotated[bool, typer.Option(help="Only overdue hosts.")] = False,
    label: Annotated[list[str] | None, typer.Option(help="key=value; repeat for AND.")] = None,
    organization: Annotated[str | None, typer.Option(help="Only this organization.")] = None,
    limit: Annotated[int, typer.Option(help="Hosts per page (1..1000).")] = 100,
    all_pages: Annotated[bool, typer.Option("--all", help="Follow every page.")] = False,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hosts matching every filter given, by host id."""
    api = client(token)
    rows: list[dict[str, Any]] = []
    cursor = None
    with api_errors():
        while True:
            answer = api.get(
                f"{SCHEDULER}/hosts",
                state=state,
                maintenance=maintenance,
                overdue=overdue or None,
                label=label,
                organization=organization,
                limit=limit,
                cursor=cursor,
            )
            rows += answer["data"]
            cursor = answer.get("next_cursor")
            if not all_pages or not cursor:
                break
    if as_json:
        _print_json({"data": rows, "count": answer["count"], "next_cursor": cursor})
        return
    table(rows, HOST_COLUMNS)
    more = f"; --all or --limit for more ({answer['count']} match)" if cursor else ""
    _out(f"{len(rows)} host(s){more}")


@hosts_app.command("show")
def hosts_show(
    host_id: str,
    history: Annotated[bool, typer.Option(help="Also its latest scans and commands.")] = False,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One host's schedule and latest compliance result."""
    api = client(token)
    with api_errors():
        host = api.get(f"{SCHEDULER}/hosts/{_path(host_id)}")
        entries = api.get(f"{SCHEDULER}/hosts/{_path(host_id)}/history") if history else None
    if as_json:
        _print_json({**host, "history": entries["data"]} if entries else host)
        return
    fields(host)
    if entries:
        _out("history (newest first):")
        rows = [
            {
                **entry,
                "at": entry.get("completed_at") or entry.get("issued_at"),
                "what": entry.get("status") or entry.get("outcome") or "in flight",
            }
            for entry in entries["data"]
        ]
        table(
            rows,
            [("AT", "at"), ("KIND", "kind"), ("SCANNER", "scanner"), ("RESULT", "what"),
             ("SCORE", "score"), ("REASON", "reason"), ("COMMAND", "command_id")],
        )  # fmt: skip


@hosts_app.command("force-scan")
def hosts_force_scan(
    host_id: str, wait: WaitOpt = True, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Scan a host now with top priority, even in maintenance (needs SECURITY_ANALYST)."""
    with api_errors():
        answer = client(token).post(
            f"{SCHEDULER}/hosts/{_path(host_id)}/force-scan", wait=wait or None
        )
    _accepted(answer, as_json, lambda host: f"scan requested for {host['host_id']}")


@hosts_app.command("maintenance")
def hosts_maintenance(
    host_id: str,
    on: Annotated[bool, typer.Option("--on/--off", help="Enter or leave maintenance.")] = True,
    hours: Annotated[int | None, typer.Option(help="Leave it after 1..168 hours.")] = None,
    wait: WaitOpt = True,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Put a host in maintenance (optionally for N hours) or take it out."""
    body = {"enabled": on, "duration_hours": hours}
    with api_errors():
        answer = client(token).put(
            f"{SCHEDULER}/hosts/{_path(host_id)}/maintenance", body, wait=wait or None
        )
    _accepted(
        answer,
        as_json,
        lambda host: (
            f"{host['host_id']}: maintenance {'on' if host['maintenance_mode'] else 'off'}"
            + (f" until {host['maintenance_until']}" if host.get("maintenance_until") else "")
        ),
    )


@hosts_app.command("deactivate")
def hosts_deactivate(
    host_id: str, wait: WaitOpt = True, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Stop scanning a host but keep it, every other attribute as is (needs SECURITY_ADMIN)."""
    with api_errors():
        answer = client(token).post(
            f"{SCHEDULER}/hosts/{_path(host_id)}/deactivate", wait=wait or None
        )
    _accepted(answer, as_json, lambda host: f"{host['host_id']}: inactive")


@hosts_app.command("reactivate")
def hosts_reactivate(
    host_id: str, wait: WaitOpt = True, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Scan an inactive host again, at once if it is due (needs SECURITY_ADMIN)."""
    with api_errors():
        answer = client(token).post(
            f"{SCHEDULER}/hosts/{_path(host_id)}/reactivate", wait=wait or None
        )
    _accepted(answer, as_json, lambda host: f"{host['host_id']}: active")


@hosts_app.command("delete")
def hosts_delete(
    host_id: str, wait: WaitOpt = True, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Remove a host from the fleet; its commands end (needs SECURITY_ADMIN)."""
    with api_errors():
        answer = client(token).request(
            "DELETE", f"{SCHEDULER}/hosts/{_path(host_id)}", query={"wait": wait or None}
        )
    _accepted(answer, as_json, lambda _: f"deleted {host_id}")


# --- config ------------------------------------------------------------------------------


@config_app.command("show")
def config_show(token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The scheduler configuration (defaults, version 0, before any change)."""
    with api_errors():
        answer = client(token).get(f"{SCHEDULER}/config")
    if as_json:
        _print_json(answer)
    else:
        fields(answer)


def _typed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


@config_app.command("set")
def config_set(
    changes: Annotated[
        list[str], typer.Argument(help="field=value pairs, e.g. max_concurrent_scans=50")
    ],
    wait: WaitOpt = True,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change some configuration fields (needs SECURITY_ADMIN); each keeps its range."""
    body: dict[str, Any] = {}
    for item in changes:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _err(f"give field=value, not {item!r}")
            raise typer.Exit(code=EXIT_INVALID)
        body[key] = _typed(value)
    with api_errors():
        answer = client(token).put(f"{SCHEDULER}/config", body, wait=wait or None)
    _accepted(answer, as_json, lambda config: f"configuration version {config['version']}")


# --- schedules ---------------------------------------------------------------------------

SCHEDULE_COLUMNS = [
    ("NAME", "name"),
    ("STATUS", "status"),
    ("NEXT", "next_fire_at"),
    ("LAST", "last_fired_at"),
    ("RUNS", "runs"),
    ("SKIPPED", "skipped_runs"),
    ("FAILED", "failed_runs"),
]
RUN_COLUMNS = [
    ("OCCURRENCE", "occurrence"),
    ("ATTEMPT", "attempt"),
    ("REASON", "reason"),
    ("FIRED", "fired_at"),
    ("OUTCOME", "outcome"),
    ("HOSTS", "hosts_matched"),
    ("COMMANDS", "commands_issued"),
    ("ERROR", "error"),
]


def _definition(file: Path) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
        definition = json.loads(text)
    except (OSError, ValueError) as error:
        _err(f"cannot read {file}: {error}")
        raise typer.Exit(code=EXIT_INVALID) from None
    if not isinstance(definition, dict):
        _err(f"{file} must hold one JSON object")
        raise typer.Exit(code=EXIT_INVALID)
    return definition


def _receipt(answer: Any, as_json: bool, what: str) -> None:
    if as_json:
        _print_json(answer)
    else:
        _out(f"{what}: event {answer['event_id']}")


@schedules_app.command("list")
def schedules_list(token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Every schedule: name, status, next and last fire time, run counts."""
    with api_errors():
        answer = client(token).get(JOBS, limit=500)
    if as_json:
        _print_json(answer)
    else:
        table(answer["data"], SCHEDULE_COLUMNS)


@schedules_app.command("show")
def schedules_show(name: str, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """One schedule: definition, state, next 5 fire times, latest runs."""
    with api_errors():
        answer = client(token).get(f"{JOBS}/{_path(name)}")
    if as_json:
        _print_json(answer)
        return
    fields({k: v for k, v in answer.items() if k != "definition"})
    _out("definition: " + json.dumps(answer["definition"], sort_keys=True))
    _out("next fire times: " + (", ".join(answer["next_fire_times"]) or "-"))
    if answer["recent_runs"]:
        table(answer["recent_runs"], RUN_COLUMNS)


FileOpt = Annotated[Path, typer.Option("--file", help="A JSON schedule definition; - for stdin.")]


@schedules_app.command("create")
def schedules_create(file: FileOpt, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Create a schedule from a JSON definition (its `name` is its id); 409 if it exists."""
    definition = _definition(file)
    with api_errors():
        answer = client(token).post(JOBS, definition)
    _receipt(answer, as_json, f"schedule {definition.get('name')!r} created")


@schedules_app.command("update")
def schedules_update(
    name: str, file: FileOpt, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Change some fields of a schedule's definition (PATCH); the name cannot change."""
    definition = _definition(file)
    with api_errors():
        answer = client(token).patch(f"{JOBS}/{_path(name)}", definition)
    _receipt(answer, as_json, f"schedule {name!r} updated")


def _action(name: str, action: str, token: str | None, as_json: bool, body: Any = None) -> None:
    with api_errors():
        answer = client(token).post(f"{JOBS}/{_path(name)}/{action}", body)
    _receipt(answer, as_json, f"{action} accepted for {name!r}")


@schedules_app.command("enable")
def schedules_enable(name: str, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Turn a disabled schedule on."""
    _action(name, "enable", token, as_json)


@schedules_app.command("disable")
def schedules_disable(name: str, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Turn a schedule off."""
    _action(name, "disable", token, as_json)


@schedules_app.command("pause")
def schedules_pause(
    name: str,
    note: Annotated[str | None, typer.Option(help="Why it is paused.")] = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hold a schedule's occurrences back until it is resumed."""
    _action(name, "pause", token, as_json, {"note": note})


@schedules_app.command("resume")
def schedules_resume(name: str, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Resume a paused schedule (missed occurrences follow its catch-up policy)."""
    _action(name, "resume", token, as_json)


@schedules_app.command("trigger")
def schedules_trigger(name: str, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Run a schedule now (404 if there is no such schedule)."""
    _action(name, "trigger", token, as_json)


@schedules_app.command("backfill")
def schedules_backfill(
    name: str,
    start: Annotated[datetime, typer.Option(help="First instant (inclusive), ISO 8601.")],
    end: Annotated[datetime, typer.Option(help="Last instant (exclusive), ISO 8601.")],
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run every occurrence in [start, end) (and before now) again."""
    body = {"start": start.isoformat(), "end": end.isoformat()}
    _action(name, "backfill", token, as_json, body)


@schedules_app.command("history")
def schedules_history(
    name: str,
    limit: Annotated[int, typer.Option(help="Runs to show (1..500).")] = 50,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A schedule's latest runs, newest first, and counts by outcome."""
    with api_errors():
        answer = client(token).get(f"{JOBS}/{_path(name)}/history", limit=limit)
    if as_json:
        _print_json(answer)
        return
    table(answer["data"], RUN_COLUMNS)
    stats = answer["stats"]
    rate = stats["success_rate"]
    _out(
        f"{stats['total']} run(s): {stats['fired']} fired, {stats['skipped']} skipped, "
        f"{stats['failed']} failed; success rate {'-' if rate is None else f'{rate:.0%}'}"
    )


@schedules_app.command("delete")
def schedules_delete(name: str, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a schedule (a system schedule needs SUPER_ADMIN)."""
    with api_errors():
        answer = client(token).delete(f"{JOBS}/{_path(name)}")
    _receipt(answer, as_json, f"delete accepted for {name!r}")


# --- dead letters ------------------------------------------------------------------------


@dead_letters_app.command("list")
def dead_letters_list(
    limit: Annotated[int, typer.Option(help="How many, newest first (1..1000).")] = 50,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Messages Kairos could not accept, newest first (needs SECURITY_ADMIN)."""
    with api_errors():
        answer = client(token).get(f"{SCHEDULER}/dead-letters", limit=limit)
    if as_json:
        _print_json(answer)
        return
    columns = [("RECEIVED", "received_at"), ("TOPIC", "source_topic"), ("KEY", "key")]
    table(answer["data"], [*columns, ("ERROR", "error")])
    _out(f"{len(answer['data'])} of {answer['count']} dead letter(s)")


@dead_letters_app.command("redrive")
def dead_letters_redrive(
    event_id: Annotated[str, typer.Argument(help="The dead letter's event id.")],
    body: Annotated[
        Path | None,
        typer.Option(
            "--body", help="A corrected message (JSON file; - for stdin) to send instead."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Send it again though it was redriven.")] = False,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send a dead letter back to its source topic, unchanged or as the corrected --body
    (needs SECURITY_ADMIN)."""
    request = {"body": _definition(body)} if body is not None else None
    with api_errors():
        answer = client(token).post(
            f"{SCHEDULER}/dead-letters/{_path(event_id)}/redrive",
            request,
            force=True if force else None,
        )
    if as_json:
        _print_json(answer)
        return
    _out(
        f"redriven to {answer['topic']} (partition {answer['partition']}, offset"
        f" {answer['offset']}) as event {answer['redrive_event_id']}"
    )


# --- audit -------------------------------------------------------------------------------


def audit(
    actor: Annotated[str | None, typer.Option(help="A token name.")] = None,
    change_type: Annotated[
        str | None,
        typer.Option("--type", help="schedule.paused, host.created, token.revoked, ..."),
    ] = None,
    subject: Annotated[
        str | None, typer.Option(help="A host id, a schedule name, a token name, or config.")
    ] = None,
    since: Annotated[str | None, typer.Option(help="From this instant (ISO 8601, with Z).")] = None,
    until: Annotated[str | None, typer.Option(help="Before this instant (ISO 8601).")] = None,
    limit: Annotated[int, typer.Option(help="How many, newest first (1..1000).")] = 50,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Who changed what, and when, newest first (needs SECURITY_ANALYST)."""
    query = {
        "actor": actor,
        "type": change_type,
        "subject": subject,
        "since": since,
        "until": until,
        "limit": limit,
    }
    with api_errors():
        answer = client(token).get(f"{SCHEDULER}/audit", **query)
    if as_json:
        _print_json(answer)
        return
    columns = [("AT", "at"), ("ACTOR", "actor"), ("TYPE", "type")]
    table(answer["data"], [*columns, ("KIND", "subject_kind"), ("SUBJECT", "subject_id")])
    _out(f"{len(answer['data'])} of {answer['count']} change(s)")


# --- alerts ------------------------------------------------------------------------------


@alerts_app.command("list")
def alerts_list(
    state: Annotated[
        str | None, typer.Option(help="firing or resolved (both when not given).")
    ] = None,
    alert_type: Annotated[
        str | None,
        typer.Option(
            "--type",
            help="score_dropped, became_critical, past_promise, schedule_disabled, cap_saturated.",
        ),
    ] = None,
    subject: Annotated[str | None, typer.Option(help="A host or schedule id.")] = None,
    limit: Annotated[int, typer.Option(help="How many, newest first (1..1000).")] = 50,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Alerts newest first, firing and resolved."""
    query = {"state": state, "type": alert_type, "subject": subject, "limit": limit}
    with api_errors():
        answer = client(token).get(
            f"{SCHEDULER}/alerts", **{key: value for key, value in query.items() if value}
        )
    if as_json:
        _print_json(answer)
        return
    columns = [("RAISED", "raised_at"), ("STATE", "state"), ("TYPE", "alert_type")]
    table(answer["data"], [*columns, ("SUBJECT", "subject_id"), ("SUMMARY", "summary")])
    _out(f"{len(answer['data'])} of {answer['count']} alert(s); {answer['firing']} firing")


# --- commands and workers ----------------------------------------------------------------

COMMAND_COLUMNS = [
    ("ISSUED", "issued_at"),
    ("COMMAND", "command_id"),
    ("HOST", "host_id"),
    ("SCANNER", "scanner"),
    ("REASON", "reason"),
    ("SCHEDULE", "schedule_id"),
    ("STATE", "command_state"),
    ("ENDED", "outcome_at"),
]


def commands_list(
    host: Annotated[str | None, typer.Option(help="Only this host's commands.")] = None,
    scanner: Annotated[str | None, typer.Option(help="Only this scanner's.")] = None,
    schedule: Annotated[str | None, typer.Option(help="Only this schedule's (its id).")] = None,
    run: Annotated[
        str | None,
        typer.Option(help="Only this run (its occurrence, RFC 3339 with offset); see --schedule."),
    ] = None,
    organization: Annotated[
        str | None, typer.Option(help="Only this organization's hosts.")
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option(help="scheduled, retry, force, schedule, trigger or unknown."),
    ] = None,
    state: Annotated[
        str | None, typer.Option(help="in_flight, succeeded, failed or timed_out.")
    ] = None,
    issued_from: Annotated[
        str | None, typer.Option("--from", help="Issued at or after (RFC 3339 with offset).")
    ] = None,
    issued_until: Annotated[
        str | None, typer.Option("--until", help="Issued before (RFC 3339 with offset).")
    ] = None,
    limit: Annotated[int, typer.Option(help="Commands per page (1..1000).")] = 50,
    all_pages: Annotated[bool, typer.Option("--all", help="Follow every page.")] = False,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Scan commands matching every filter given, newest issued first, and how each ended.

    STATE is in_flight until a result (succeeded, failed) or the deadline (timed_out) ends it."""
    query = {
        "host": host,
        "scanner": scanner,
        "schedule": schedule,
        "run": run,
        "organization": organization,
        "reason": reason,
        "state": state,
        "issued_from": issued_from,
        "issued_until": issued_until,
    }
    api = client(token)
    rows: list[dict[str, Any]] = []
    cursor = None
    with api_errors():
        while True:
            answer = api.get(
                f"{SCHEDULER}/commands",
                **{key: value for key, value in query.items() if value is not None},
                limit=limit,
                cursor=cursor,
            )
            rows += answer["data"]
            cursor = answer.get("next_cursor")
            if not all_pages or not cursor:
                break
    if as_json:
        _print_json({"data": rows, "count": answer["count"], "next_cursor": cursor})
        return
    table(rows, COMMAND_COLUMNS)
    more = f"; --all or --limit for more ({answer['count']} match)" if cursor else ""
    _out(f"{len(rows)} command(s){more}")


def workers(token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The worker group as Kafka sees it: members, their partitions and lag, and which one
    owns the dispatch queue."""
    with api_errors():
        answer = client(token).get(f"{SCHEDULER}/workers")
    if as_json:
        _print_json(answer)
        return
    _out(f"group {answer['group_id']} ({answer['state']}), lag {answer['lag']}")
    rows = [
        {
            **member,
            "dispatch": "owner" if member["owns_dispatch"] else "",
            "assigned": len(member["partitions"]),
        }
        for member in answer["members"]
    ]
    columns = [("MEMBER", "member_id"), ("CLIENT", "client_id"), ("HOST", "client_host")]
    columns += [("VERSION", "version"), ("PARTITIONS", "assigned"), ("LAG", "lag")]
    table(rows, [*columns, ("DISPATCH", "dispatch")])
    unassigned = answer["unassigned"]
    if unassigned:
        names = ", ".join(f"{p['topic']}[{p['partition']}]" for p in unassigned[:10])
        _out(f"{len(unassigned)} partition(s) unassigned: {names}")
    _out(f"{len(answer['members'])} member(s); dispatch owner: {answer['dispatch_owner'] or '-'}")
