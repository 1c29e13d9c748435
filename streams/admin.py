"""Creates and checks the topics Kairos needs, before any agent starts."""

from __future__ import annotations

import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from kairos.floor.kafka_reach import kafka_failure_reason
from kairos.floor.settings import Settings, topic_durability_problem
from streams.topology import TopicSpec, topic_specs

log = logging.getLogger(__name__)


class KafkaUnavailable(ConnectionError):
    """Kafka could not be reached; the message names where."""


class TopicLayoutMismatch(RuntimeError):
    """Existing topics disagree with the settings (e.g. partition counts)."""


class UnsafeTopicSettings(TopicLayoutMismatch):
    """In prod, the settings would create topics that lose acknowledged events."""


async def admin_client(settings: Settings) -> AIOKafkaAdminClient:
    """A started admin client, or KafkaUnavailable within the connect timeout.

    Every process checks Kafka through here before it starts (the worker and the projector
    via `ensure_topics`, the API directly), so prod's durability check sits here too.
    """
    problem = topic_durability_problem(settings)
    if problem:
        raise UnsafeTopicSettings(problem)
    client = AIOKafkaAdminClient(
        **settings.kafka_client_options(),
        request_timeout_ms=int(settings.connect_timeout_seconds * 1000),
    )
    try:
        await asyncio.wait_for(client.start(), settings.connect_timeout_seconds)
    except (TimeoutError, KafkaError, OSError) as error:
        await _close_quietly(client)
        if isinstance(error, TimeoutError):
            reason = f"no answer within {settings.connect_timeout_seconds:g} s"
        else:
            reason = await kafka_failure_reason(settings, settings.connect_timeout_seconds)
        raise KafkaUnavailable(
            f"Kafka is not reachable at {settings.kafka_bootstrap_servers}: {reason}"
        ) from None
    return client


async def ensure_topics(settings: Settings) -> None:
    """Create missing topics; refuse to run on topics with the wrong partition count."""
    client = await admin_client(settings)
    try:
        specs = topic_specs(settings)
        existing = set(await client.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        if missing:
            await _create(client, settings, missing)
        await _check_partitions(client, specs)
    finally:
        await _close_quietly(client)


async def _create(client: AIOKafkaAdminClient, settings: Settings, specs: list[TopicSpec]) -> None:
    new_topics = []
    for spec in specs:
        config = {"cleanup.policy": "compact" if spec.compacted else "delete"}
        if settings.min_insync_replicas:
            config["min.insync.replicas"] = str(settings.min_insync_replicas)
        new_topics.append(
            NewTopic(spec.name, spec.partitions, settings.replication_factor, topic_configs=config)
        )
    try:
        await client.create_topics(new_topics)
    except TopicAlreadyExistsError:
        pass  # Another worker won the race; the partition check below still applies.
    log.info("created topics: %s", ", ".join(spec.name for spec in specs))


async def _check_partitions(client: AIOKafkaAdminClient, specs: list[TopicSpec]) -> None:
    for _ in range(50):
        described = await client.describe_topics([spec.name for spec in specs])
        counts = {item["topic"]: len(item["partitions"]) for item in described}
        if all(counts.get(spec.name) for spec in specs):
            break
        await asyncio.sleep(0.1)
    wrong = [
        f"{spec.name} has {counts.get(spec.name)} partitions, expected {spec.partitions}"
        for spec in specs
        if counts.get(spec.name) != spec.partitions
    ]
    if wrong:
        raise TopicLayoutMismatch("; ".join(wrong))


async def _close_quietly(client: AIOKafkaAdminClient) -> None:
    try:
        await client.close()
    except Exception:  # noqa: BLE001 - closing a half-started client may fail any way
        log.debug("admin client close failed", exc_info=True)
