"""The production compose file, Dockerfile and .dockerignore, checked without a Docker engine.

docker-compose.yml cannot be started here, so it must be right by construction: it is
validated against the compose specification's JSON Schema (as vendored by check-jsonschema),
which settles its shape, and these tests hold what the schema cannot know to the Kafka cluster
it describes, to the Settings model the Kairos processes read, to the CLI they run and to the
API routes their health checks call.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from pydantic import AliasChoices, SecretStr
from typer.testing import CliRunner

from kairos.cli import app as cli_app
from kairos.floor.settings import Environment, Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

KAFKA_SERVICES = ("kafka-1", "kafka-2", "kafka-3")
KAIROS_SERVICES = ("worker", "projector", "api")
MONITORING_SERVICES = ("prometheus", "grafana")
HEALTHCHECKED_SERVICES = (*KAFKA_SERVICES, "postgres", "api", "worker", *MONITORING_SERVICES)
# Values the operator must supply; stand-ins used to resolve the file as compose would.
OPERATOR_ENV = {
    "POSTGRES_PASSWORD": "pg-test-password",
    "KAIROS_TOKEN_SECRET": "token-test-secret",
    "GRAFANA_ADMIN_PASSWORD": "grafana-test-password",
}


# --- compose-style variable interpolation --------------------------------------------------
class MissingVariable(LookupError):
    """A `${NAME:?message}` / `${NAME?message}` reference whose variable is not set."""


_REFERENCE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
_REQUIRED_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*):?\?[^}]*\}")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Resolve ${...} references in every string of a parsed compose tree, like compose does."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def resolve(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        name = match.group("name") or match.group("bare")
        op, arg = match.group("op"), match.group("arg")
        is_set, non_empty = name in env, bool(env.get(name))
        if (op == ":?" and not non_empty) or (op == "?" and not is_set):
            raise MissingVariable(name)
        if op == ":-":
            return env[name] if non_empty else arg
        if op == "-":
            return env[name] if is_set else arg
        return env.get(name, "")

    return _REFERENCE.sub(resolve, value)


def test_interpolation_helper_follows_compose_rules() -> None:
    env = {"SET": "value", "EMPTY": ""}
    resolved = interpolate("${SET:?x}/${EMPTY:-d}/${UNSET-e}/$$SET/${SET}", env)
    assert resolved == "value/d/e/$SET/value"
    with pytest.raises(MissingVariable, match="EMPTY"):
        interpolate("${EMPTY:?set it}", env)


# --- fixtures and parsers ------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The file as written (references unresolved)."""
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def resolved(compose: dict[str, Any]) -> dict[str, Any]:
    """The file as compose sees it once the operator has exported the required secrets."""
    return interpolate(compose, OPERATOR_ENV)


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment as a name -> string mapping (list or mapping syntax)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in raw)
        return {name: value for name, value in pairs}
    return {name: "" if value is None else str(value) for name, value in raw.items()}


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """`NAME://host:port,...` -> {NAME: (host, port)}."""
    parsed: dict[str, tuple[str, int]] = {}
    for entry in value.split(","):
        name, _, address = entry.strip().partition("://")
        host, _, port = address.rpartition(":")
        parsed[name] = (host, int(port))
    return parsed


def quorum_voters(value: str) -> dict[int, tuple[str, int]]:
    """`id@host:port,...` -> {id: (host, port)}."""
    voters: dict[int, tuple[str, int]] = {}
    for entry in value.split(","):
        node_id, _, address = entry.strip().partition("@")
        host, _, port = address.rpartition(":")
        voters[int(node_id)] = (host, int(port))
    return voters


def healthcheck_command(service: Mapping[str, Any]) -> list[str]:
    """The health check's test in its list form (the schema allows a string or a list)."""
    check = service.get("healthcheck")
    assert check, "no healthcheck"
    assert not check.get("disable", False)
    test = check["test"]
    if isinstance(test, str):
        return ["CMD-SHELL", test]
    # The schema takes any strings; compose wants CMD or CMD-SHELL first (or NONE: no check).
    assert test[0] in ("CMD", "CMD-SHELL"), test
    return [str(part) for part in test]


def settings_env_names() -> set[str]:
    """Every environment name Settings reads, derived from the model itself."""
    prefix = Settings.model_config.get("env_prefix", "")
    names: set[str] = set()
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(choice for choice in alias.choices if isinstance(choice, str))
        elif isinstance(alias, str):
            names.add(alias)
        else:
            names.add(f"{prefix}{field_name}".upper())
    return names


def secret_env_names() -> set[str]:
    """Environment names of the Settings fields typed SecretStr."""
    prefix = Settings.model_config.get("env_prefix", "")
    return {
        f"{prefix}{name}".upper()
        for name, field in Settings.model_fields.items()
        if field.annotation is SecretStr or SecretStr in typing.get_args(field.annotation)
    }


def kairos_env_names(env: Mapping[str, str]) -> set[str]:
    """Names that are meant for a Kairos process (anything Kafka/database/KAIROS-shaped)."""
    return {name for name in env if name.startswith(("KAIROS_", "KAFKA_", "DATABASE_"))}


def kafka_plaintext_address(service: Mapping[str, Any]) -> tuple[str, int]:
    env = environment(service)
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    return advertised[env["KAFKA_INTER_BROKER_LISTENER_NAME"]]


@pytest.fixture
def isolated_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[Mapping[str, str]], None]:
    """Replace every Settings-relevant environment variable with exactly the given ones."""

    def apply(env: Mapping[str, str]) -> None:
        for name in settings_env_names():
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    return apply


# --- the compose specification ----------------------------------------------------------
def compose_schema() -> dict[str, Any]:
    """The compose specification's JSON Schema, as check-jsonschema ships it (no network)."""
    from importlib.resources import files

    vendored = files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(vendored.read_text())
    assert isinstance(schema, dict)
    return schema


@pytest.fixture(scope="module")
def compose_validator() -> jsonschema.protocols.Validator:
    schema = compose_schema()
    assert "draft-07" in schema["$schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def schema_errors(validator: jsonschema.protocols.Validator, document: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def test_compose_file_follows_the_compose_specification(
    compose: dict[str, Any],
    resolved: dict[str, Any],
    compose_validator: jsonschema.protocols.Validator,
) -> None:
    # As written (references unresolved) and as compose sees it once they are resolved.
    assert schema_errors(compose_validator, compose) == []
    assert schema_errors(compose_validator, resolved) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("services", "worker", "healtcheck"), {"test": ["CMD", "true"]}),
        (("services", "api", "depends_on", "postgres", "condition"), "service_ready"),
        (("services", "worker", "deploy", "replica"), 2),
        (("services", "projector", "stop_grace_period"), 30),
    ],
    ids=["misspelled-key", "unknown-condition", "misspelled-deploy-key", "grace-not-a-duration"],
)
def test_the_schema_rejects_a_broken_compose_file(
    compose: dict[str, Any],
    compose_validator: jsonschema.protocols.Validator,
    path: tuple[str, ...],
    value: Any,
) -> None:
    broken = json.loads(json.dumps(compose))
    parent = broken
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    assert schema_errors(compose_validator, broken)


# --- services ------------------------------------------------------------------------------
def test_expected_services_exist(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {
        *KAFKA_SERVICES,
        "postgres",
        *KAIROS_SERVICES,
        *MONITORING_SERVICES,
    }


def test_kairos_services_share_the_x_kairos_env_anchor(compose: dict[str, Any]) -> None:
    shared = compose["x-kairos-env"]
    assert {"KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL", "KAIROS_ENV"} <= set(shared)
    for name in KAIROS_SERVICES:
        env = environment(compose["services"][name])
        assert {key: env[key] for key in shared} == {k: str(v) for k, v in shared.items()}, name


def test_kairos_services_build_the_project_image(compose: dict[str, Any]) -> None:
    for name in KAIROS_SERVICES:
        build = compose["services"][name]["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        assert (COMPOSE_FILE.parent / context).resolve() == DOCKERFILE.parent


def test_worker_runs_two_replicas(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert worker["deploy"]["replicas"] == 2
    # A fixed container name or a published port would stop the second replica starting.
    assert "container_name" not in worker
    assert "ports" not in worker


def test_projection_runs_in_the_projector_service_not_in_the_workers(
    resolved: dict[str, Any], isolated_env: Callable[[Mapping[str, str]], None]
) -> None:
    services = resolved["services"]
    isolated_env(environment(services["worker"]))
    assert Settings().projector_enabled is False, "workers must leave projection to the service"
    projector = services["projector"]
    assert projector["command"] == ["kairos", "projector"]
    assert "ports" not in projector
    assert projector["depends_on"]["worker"]["condition"] == "service_started"


# --- kafka ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", KAFKA_SERVICES)
def test_kafka_node_is_kraft_broker_and_controller(compose: dict[str, Any], name: str) -> None:
    service = compose["services"][name]
    assert service["image"] == "apache/kafka:4.1.1"
    env = environment(service)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in key for key in env), "KRaft mode uses no ZooKeeper"
    # A KRaft cluster id is a base64url-encoded UUID: 22 characters.
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", env["CLUSTER_ID"]), env["CLUSTER_ID"]


def test_kafka_nodes_form_one_cluster(compose: dict[str, Any]) -> None:
    envs = [environment(compose["services"][name]) for name in KAFKA_SERVICES]
    assert len({env["CLUSTER_ID"] for env in envs}) == 1
    assert len({env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in envs}) == 1
    node_ids = [int(env["KAFKA_NODE_ID"]) for env in envs]
    assert len(set(node_ids)) == len(KAFKA_SERVICES), f"node ids must be unique: {node_ids}"


def test_controller_quorum_is_the_three_nodes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    expected: dict[int, str] = {}
    for name in KAFKA_SERVICES:
        env = environment(services[name])
        expected[int(env["KAFKA_NODE_ID"])] = services[name].get("hostname", name)
        assert services[name].get("hostname", name) == name
    for name in KAFKA_SERVICES:
        env = environment(services[name])
        voters = quorum_voters(env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
        assert len(voters) == 3
        assert {node_id: host for node_id, (host, _) in voters.items()} == expected
        controller_ports = {
            listeners(env["KAFKA_LISTENERS"])[listener][1]
            for listener in env["KAFKA_CONTROLLER_LISTENER_NAMES"].split(",")
        }
        assert {port for _, port in voters.values()} <= controller_ports


@pytest.mark.parametrize("name", KAFKA_SERVICES)
def test_kafka_listeners_are_consistent(compose: dict[str, Any], name: str) -> None:
    env = environment(compose["services"][name])
    bound = listeners(env["KAFKA_LISTENERS"])
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocol_map = env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    protocols = dict(pair.split(":") for pair in protocol_map.split(","))
    controller_names = set(env["KAFKA_CONTROLLER_LISTENER_NAMES"].split(","))
    inter_broker = env["KAFKA_INTER_BROKER_LISTENER_NAME"]

    assert set(bound) == {"PLAINTEXT", "CONTROLLER"}
    assert controller_names == {"CONTROLLER"}
    assert set(bound) <= set(protocols), "every listener needs a security protocol"
    assert inter_broker in bound and inter_broker not in controller_names
    assert not controller_names & set(advertised), "controller listeners are not advertised"
    for listener, (host, port) in advertised.items():
        assert host == name, "clients must reach each node by its service name"
        assert bound[listener][1] == port


@pytest.mark.parametrize("name", KAFKA_SERVICES)
def test_kafka_durability_settings(compose: dict[str, Any], name: str) -> None:
    env = environment(compose["services"][name])
    assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
    assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert int(env["KAFKA_DEFAULT_REPLICATION_FACTOR"]) <= len(KAFKA_SERVICES)
    assert int(env["KAFKA_MIN_INSYNC_REPLICAS"]) < int(env["KAFKA_DEFAULT_REPLICATION_FACTOR"])


def test_stateful_services_keep_data_on_their_own_named_volumes(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    services = compose["services"]
    targets = {name: environment(services[name])["KAFKA_LOG_DIRS"] for name in KAFKA_SERVICES}
    targets["postgres"] = "/var/lib/postgresql/data"
    sources: list[str] = []
    for name, target in targets.items():
        mounts = [str(volume).split(":") for volume in services[name]["volumes"]]
        matching = [source for source, mount_target, *_ in mounts if mount_target == target]
        assert len(matching) == 1, f"{name}: no volume mounted at {target}"
        assert matching[0] in declared, f"{name}: {matching[0]} is not a named volume"
        sources.append(matching[0])
    assert len(set(sources)) == len(sources), "each node needs its own volume"


# --- health checks and dependencies --------------------------------------------------------
@pytest.mark.parametrize("name", HEALTHCHECKED_SERVICES)
def test_service_has_a_healthcheck(compose: dict[str, Any], name: str) -> None:
    command = healthcheck_command(compose["services"][name])
    assert len(command) > 1 and command[1].strip()


@pytest.mark.parametrize("name", KAFKA_SERVICES)
def test_kafka_healthcheck_asks_the_local_broker(compose: dict[str, Any], name: str) -> None:
    service = compose["services"][name]
    command = " ".join(healthcheck_command(service)[1:])
    port = kafka_plaintext_address(service)[1]
    assert "/opt/kafka/bin/kafka-broker-api-versions.sh" in command
    assert f"--bootstrap-server localhost:{port}" in command


def test_postgres_healthcheck_uses_pg_isready(compose: dict[str, Any]) -> None:
    service = compose["services"]["postgres"]
    assert service["image"] == "postgres:17"
    command = healthcheck_command(service)[1:]
    assert command[0] == "pg_isready"
    assert environment(service)["POSTGRES_USER"] in command


def test_api_healthcheck_calls_a_real_route_on_the_served_port(compose: dict[str, Any]) -> None:
    from api.main import create_app

    api = compose["services"]["api"]
    command = healthcheck_command(api)[1:]
    assert command[:2] == ["python", "-c"]
    assert "urllib.request" in command[2]
    url = re.search(r"https?://[^'\"\s]+", command[2])
    assert url, command
    target = urlsplit(url.group(0))
    assert target.hostname == "localhost"
    assert target.port == int(api["command"][api["command"].index("--port") + 1])
    routes = {getattr(route, "path", None) for route in create_app(Settings()).routes}
    assert target.path == "/healthz" and target.path in routes


def test_worker_healthcheck_probes_the_heartbeat_of_its_own_workdir(
    compose: dict[str, Any],
) -> None:
    from typer.main import get_command

    from kairos.cli import app

    worker = compose["services"]["worker"]
    command = healthcheck_command(worker)[1:]
    assert command[:2] == ["kairos", "worker-alive"]
    assert "worker-alive" in get_command(app).commands  # type: ignore[attr-defined]
    assert environment(worker)["KAIROS_WORKDIR"], "the probe reads the worker's own workdir"


@pytest.mark.parametrize("name", KAIROS_SERVICES)
def test_kairos_service_waits_for_healthy_kafka_and_postgres(
    compose: dict[str, Any], name: str
) -> None:
    depends_on = compose["services"][name]["depends_on"]
    assert isinstance(depends_on, dict), "the long syntax is needed to wait for health"
    for dependency in (*KAFKA_SERVICES, "postgres"):
        assert depends_on[dependency]["condition"] == "service_healthy", dependency


# --- commands ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("worker", ["kairos", "worker"]),
        ("projector", ["kairos", "projector"]),
        ("api", ["kairos", "api", "--host", "0.0.0.0", "--port", "8000"]),
    ],
)
def test_command_is_a_real_cli_invocation(
    compose: dict[str, Any], name: str, expected: list[str]
) -> None:
    command = compose["services"][name]["command"]
    assert command == expected
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[0] in scripts
    # Unknown commands or options fail parsing before --help is honoured (exit code 2).
    result = CliRunner().invoke(cli_app, [*command[1:], "--help"])
    assert result.exit_code == 0, result.output


def test_api_port_mapping_matches_its_command(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    command = api["command"]
    port = int(command[command.index("--port") + 1])
    assert command[command.index("--host") + 1] == "0.0.0.0", "must be reachable from outside"
    published = [str(mapping).rsplit(":", 2)[-2:] for mapping in api["ports"]]
    assert published == [[str(port), str(port)]]


# --- the Kairos environment against Settings -----------------------------------------------
def test_settings_env_names_are_derived_from_the_model() -> None:
    names = settings_env_names()
    assert {"KAIROS_REPLICATION_FACTOR", "KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL"} <= names
    assert "KAIROS_REPLICATION_FACTORS" not in names
    assert "KAFKA_BOOTSTRAP_SERVER" not in names
    assert "KAIROS_TOKEN_SECRET" in secret_env_names()


@pytest.mark.parametrize("name", KAIROS_SERVICES)
def test_every_kairos_variable_is_a_settings_field(compose: dict[str, Any], name: str) -> None:
    env = environment(compose["services"][name])
    meant_for_kairos = kairos_env_names(env)
    assert {"KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL", "KAIROS_ENV"} <= meant_for_kairos
    unknown = meant_for_kairos - settings_env_names()
    assert not unknown, f"{name} sets variables Settings ignores: {sorted(unknown)}"


@pytest.mark.parametrize("name", KAIROS_SERVICES)
def test_environment_builds_production_settings(
    resolved: dict[str, Any], name: str, isolated_env: Callable[[Mapping[str, str]], None]
) -> None:
    isolated_env(environment(resolved["services"][name]))
    settings = Settings()
    assert settings.env is Environment.PROD
    assert settings.replication_factor == 3
    assert settings.min_insync_replicas == 2
    assert settings.token_secret.get_secret_value() == OPERATOR_ENV["KAIROS_TOKEN_SECRET"]
    assert urlsplit(settings.database_url).password == OPERATOR_ENV["POSTGRES_PASSWORD"]


def test_replication_matches_the_cluster(compose: dict[str, Any]) -> None:
    broker = environment(compose["services"][KAFKA_SERVICES[0]])
    for name in KAIROS_SERVICES:
        env = environment(compose["services"][name])
        assert env["KAIROS_REPLICATION_FACTOR"] == "3"
        assert env["KAIROS_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAIROS_REPLICATION_FACTOR"] == broker["KAFKA_DEFAULT_REPLICATION_FACTOR"]
        assert env["KAIROS_MIN_INSYNC_REPLICAS"] == broker["KAFKA_MIN_INSYNC_REPLICAS"]


@pytest.mark.parametrize("name", KAIROS_SERVICES)
def test_bootstrap_servers_are_the_advertised_listeners(compose: dict[str, Any], name: str) -> None:
    servers = environment(compose["services"][name])["KAFKA_BOOTSTRAP_SERVERS"].split(",")
    advertised = {
        "{}:{}".format(*kafka_plaintext_address(compose["services"][node]))
        for node in KAFKA_SERVICES
    }
    assert len(servers) == len(set(servers))
    assert set(servers) == advertised


@pytest.mark.parametrize("name", KAIROS_SERVICES)
def test_database_url_points_at_the_postgres_service(resolved: dict[str, Any], name: str) -> None:
    postgres = environment(resolved["services"]["postgres"])
    url = urlsplit(environment(resolved["services"][name])["DATABASE_URL"])
    assert url.scheme in ("postgresql", "postgres")
    assert url.hostname == "postgres" and "postgres" in resolved["services"]
    assert url.port in (None, 5432)
    assert url.username == postgres["POSTGRES_USER"]
    assert url.password == postgres["POSTGRES_PASSWORD"]
    assert url.path.lstrip("/") == postgres["POSTGRES_DB"]


# --- secrets -------------------------------------------------------------------------------
def test_no_secret_has_a_literal_default(compose: dict[str, Any]) -> None:
    secret_names = secret_env_names() | {"POSTGRES_PASSWORD"}
    checked: set[str] = set()
    for service_name, service in compose["services"].items():
        for key, value in environment(service).items():
            if key in secret_names or re.search(r"PASSWORD|SECRET|TOKEN", key):
                assert _REQUIRED_REFERENCE.fullmatch(value), f"{service_name}.{key}={value!r}"
                checked.add(key)
            if key == "DATABASE_URL":
                password = value.split("://", 1)[1].rsplit("@", 1)[0].split(":", 1)[1]
                assert _REQUIRED_REFERENCE.fullmatch(password), f"{service_name}: {password!r}"
    assert {"POSTGRES_PASSWORD", "KAIROS_TOKEN_SECRET"} <= checked


def test_compose_refuses_to_start_without_the_secrets(compose: dict[str, Any]) -> None:
    for missing in OPERATOR_ENV:
        env = {name: value for name, value in OPERATOR_ENV.items() if name != missing}
        with pytest.raises(MissingVariable, match=missing):
            interpolate(compose, env)


# --- Dockerfile and .dockerignore ------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with comments dropped and continuations joined."""
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line.strip())
        pending = ""
    pairs = []
    for statement in logical:
        keyword, _, arguments = statement.partition(" ")
        pairs.append((keyword.upper(), " ".join(arguments.split())))
    return pairs


def test_dockerfile_base_image_and_default_command() -> None:
    instructions = dockerfile_instructions()
    assert [args for keyword, args in instructions if keyword == "FROM"] == ["python:3.11-slim"]
    assert not [args for keyword, args in instructions if keyword == "ENTRYPOINT"]
    commands = [args for keyword, args in instructions if keyword == "CMD"]
    assert commands and json.loads(commands[-1]) == ["kairos", "--help"]


def test_dockerfile_installs_the_project() -> None:
    instructions = dockerfile_instructions()
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    assert any(re.search(r"\bpip install (?:[^&;|]* )?\.(?:\s|$)", run) for run in runs), runs
    copies = [args.split() for keyword, args in instructions if keyword == "COPY"]
    assert any(parts[0] == "." for parts in copies), "the build context must be copied in"


def test_dockerfile_runs_as_a_created_non_root_user() -> None:
    instructions = dockerfile_instructions()
    users = [(i, args) for i, (keyword, args) in enumerate(instructions) if keyword == "USER"]
    assert users, "no USER line: the container would run as root"
    last_index, last_user = users[-1]
    user = last_user.split(":")[0]
    assert user not in ("root", "0")
    created = {
        segment.split()[-1]
        for keyword, args in instructions[:last_index]
        if keyword == "RUN"
        for segment in args.split("&&")
        if segment.split() and segment.split()[0] == "useradd"
    }
    assert user in created, f"user {user!r} is never created (useradd creates {created})"
    # Nothing may switch back to root after the final USER.
    assert all(keyword != "USER" for keyword, _ in instructions[last_index + 1 :])


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: end + 1]) for end in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        bodies = [body, body[3:]] if body.startswith("**/") else [body]
        if any(fnmatch.fnmatchcase(candidate, b) for candidate in candidates for b in bodies):
            excluded = not negated
    return excluded


def project_files() -> Iterator[str]:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for top_level in {pattern.rstrip("*.") for pattern in packages["packages"]["find"]["include"]}:
        files = [
            path
            for path in (ROOT / top_level).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        ]
        assert files, f"package {top_level} has no files"
        yield from (path.relative_to(ROOT).as_posix() for path in files)


def test_dockerignore_keeps_what_pip_install_needs_and_drops_the_rest() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    needed = ["pyproject.toml", "README.md", *project_files()]
    kept_out = [path for path in needed if dockerignore_excludes(path, patterns)]
    assert not kept_out, f".dockerignore drops files the install needs: {kept_out}"
    for unwanted in (
        "tests/unit/test_compose.py",
        ".git/HEAD",
        ".venv/bin/python",
        ".kairos/worker/state",
        "kairos/__pycache__/cli.cpython-311.pyc",
        "docker-compose.yml",
    ):
        assert dockerignore_excludes(unwanted, patterns), unwanted


# --- monitoring --------------------------------------------------------------------------
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_prometheus_scrapes_each_kairos_process_on_the_port_it_serves(
    compose: dict[str, Any],
) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for name in ("worker", "projector"):
        port = int(environment(compose["services"][name])["KAIROS_METRICS_PORT"])
        assert environment(compose["services"][name])["KAIROS_METRICS_HOST"] == "0.0.0.0"
        job = jobs[f"kairos-{name}"]
        targets = [
            *(f"{n}:{sd['port']}" for sd in job.get("dns_sd_configs", []) for n in sd["names"]),
            *(t for sc in job.get("static_configs", []) for t in sc["targets"]),
        ]
        assert targets == [f"{name}:{port}"]
    api = compose["services"]["api"]
    api_port = api["command"][api["command"].index("--port") + 1]
    assert jobs["kairos-api"]["static_configs"][0]["targets"] == [f"api:{api_port}"]
    mounted = compose["services"]["prometheus"]["volumes"][0].split(":")[0]
    assert mounted == "./deploy/prometheus.yml"


def test_grafana_dashboard_only_plots_metrics_kairos_exports() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "kairos.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {
        re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"kairos_\w+", e)
    }
    root = Path(__file__).resolve().parents[2]
    source = "".join(p.read_text() for d in ("streams", "api") for p in (root / d).rglob("*.py"))
    missing = sorted(name for name in used if f'"{name}' not in source)
    assert used and not missing, f"dashboard plots metrics nobody exports: {missing}"


def test_alert_rules_are_loaded_and_only_use_metrics_kairos_exports(
    compose: dict[str, Any],
) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    volumes = compose["services"]["prometheus"]["volumes"]
    assert "./deploy/alerts.yml:/etc/prometheus/alerts.yml:ro" in volumes
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    rules = [
        rule
        for group in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    ]
    names = {rule["alert"] for rule in rules}
    assert "KairosForecastBreaksPromise" in names
    for rule in rules:
        assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule), rule
    used = {
        re.sub(r"_(bucket|sum|count)$", "", m)
        for rule in rules
        for text in (rule["expr"], *rule["annotations"].values())
        for m in re.findall(r"kairos_\w+", text)
    }
    root = Path(__file__).resolve().parents[2]
    source = "".join(p.read_text() for d in ("streams", "api") for p in (root / d).rglob("*.py"))
    missing = sorted(name for name in used if f'"{name}' not in source)
    assert used and not missing, f"alerts use metrics nobody exports: {missing}"
