"""Session-wide real servers: one Kafka-protocol broker and one PostgreSQL per test run.

Tests isolate themselves by a unique topic prefix, app id and database.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kairos.floor.settings import Settings
from tests.support.stack import (
    ProjectorProcess,
    WorkerProcess,
    chosen_broker,
    start_projector,
    start_worker,
    unique_name,
)


@pytest.fixture(scope="session")
def broker_kind() -> str:
    return chosen_broker()


@pytest.fixture(scope="session")
def bootstrap_servers(broker_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if broker_kind == "external":
        yield os.environ["KAFKA_BOOTSTRAP_SERVERS"]
        return
    if broker_kind == "apache":
        from kairos.localstack.apache import ApacheKafkaCluster

        cluster = ApacheKafkaCluster(tmp_path_factory.mktemp("kafka"), nodes=1)
        cluster.start()
        try:
            yield cluster.bootstrap_servers
        finally:
            cluster.stop()
        return
    from kairos.localstack.tansu import TansuBroker

    tansu = TansuBroker(log_path=tmp_path_factory.mktemp("tansu") / "tansu.log")
    tansu.start()
    try:
        yield tansu.bootstrap_servers
    finally:
        tansu.stop()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """A function that creates a fresh database and returns its DSN."""
    external = os.environ.get("DATABASE_URL")
    if external:
        import psycopg

        def create_external(name: str) -> str:
            with psycopg.connect(external, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            info = psycopg.conninfo.conninfo_to_dict(external)
            info["dbname"] = name
            return psycopg.conninfo.make_conninfo(**info)

        yield create_external
        return
    from kairos.localstack.postgres import LocalPostgres

    server = LocalPostgres(tmp_path_factory.mktemp("postgres") / "data", fast=True)
    server.start()
    try:
        yield server.create_database
    finally:
        server.stop()


@pytest.fixture
def make_settings(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> Callable[..., Settings]:
    """Settings for one test: its own topics, consumer group and database."""
    database = postgres_server(unique_name("kairos_"))

    def make(**overrides: object) -> Settings:
        prefix = unique_name("t")
        values: dict[str, object] = {
            "kafka_bootstrap_servers": bootstrap_servers,
            "database_url": database,
            "topic_prefix": f"{prefix}-",
            "app_id": "kairos",
            "partitions": 4,
            "kafka_idempotence": broker_kind != "tansu",
            "connect_timeout_seconds": 15.0,
            "tick_seconds": 0.05,
        }
        values.update(overrides)
        return Settings.model_validate(values)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[[Settings], WorkerProcess]]:
    """Starts `kairos worker` processes; all are stopped after the test."""
    started: list[WorkerProcess] = []

    def launch(settings: Settings, *, wait: bool = True) -> WorkerProcess:
        worker = start_worker(settings, tmp_path / f"worker-{len(started)}")
        started.append(worker)
        if wait:
            worker.wait_ready()
        return worker

    yield launch
    for worker in started:
        worker.stop()


@pytest.fixture
def projectors(tmp_path: Path) -> Iterator[Callable[[Settings], ProjectorProcess]]:
    """Starts `kairos projector` processes; all are stopped after the test."""
    started: list[ProjectorProcess] = []

    def launch(settings: Settings, *, wait: bool = True) -> ProjectorProcess:
        projector = start_projector(settings, tmp_path / f"projector-{len(started)}")
        started.append(projector)
        if wait:
            projector.wait_ready()
        return projector

    yield launch
    for projector in started:
        projector.stop()
