"""The worker group as Kafka's group coordinator sees it: members, assignments, lag.

Read with the admin client (`describe_consumer_groups`, `list_consumer_group_offsets`) and a
group-less consumer for the end offsets; no registry of Kairos' own. The group id is the
workers' Faust app id (`KAIROS_TOPIC_PREFIX` + `KAIROS_APP_ID`). Answers are shared for
`WORKERS_CACHE_SECONDS`, so a console polling every second does not ask the broker each time.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import KafkaError

from api.errors import KafkaUnavailable
from api.probes import SharedProbe
from kairos.floor.settings import Settings
from schemas.api import WorkerMemberPublic, WorkerPartitionPublic, WorkersPublic

WORKERS_CACHE_SECONDS = 2.0
RETRY_SECONDS = 0.2
_VERSION = re.compile(r"(?:^|[-_/ ])v?(\d+\.\d+(?:\.\d+)?(?:[-.+][0-9A-Za-z.]+)?)$")


def group_id(settings: Settings) -> str:
    """The workers' consumer group: the Faust app id `streams.app.Worker` gives its app."""
    return f"{settings.topic_prefix}{settings.app_id}"


def version_of(client_id: str) -> str | None:
    """The version a client id ends with (`faust-0.15.3`, `kairos-worker-1.2.0`), if any."""
    found = _VERSION.search(client_id)
    return found.group(1) if found else None


def _is_state(topic: str) -> bool:
    """A table's changelog or Faust's assignor topic: read on recovery, never committed, so a
    lag against no commit would mean nothing."""
    return topic.endswith("-changelog") or topic.endswith("__assignor-__leader")


def _decode_assignment(raw: bytes) -> list[tuple[str, int]]:
    if not raw:
        return []
    assignment = ConsumerProtocolMemberAssignment.decode(raw)
    return [
        (topic, partition)
        for topic, partitions in assignment.assignment
        for partition in partitions
    ]


def _decode_subscription(raw: bytes) -> list[str]:
    if not raw:
        return []
    return list(ConsumerProtocolMemberMetadata.decode(raw).subscription)


async def _end_offsets(
    options: dict[str, Any], partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(**options, group_id=None, enable_auto_commit=False)
    try:
        await consumer.start()
        ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
        return ends
    finally:
        await consumer.stop()


class WorkerGroup:
    """Reads the worker group; one instance per API process, answers cached."""

    def __init__(self, settings: Settings, *, timeout: float) -> None:
        self._settings = settings
        self._timeout = timeout
        self._probe: SharedProbe[WorkersPublic] = SharedProbe(WORKERS_CACHE_SECONDS)

    async def describe(self, *, now: datetime) -> WorkersPublic:
        return await self._probe.get(lambda: self._ask(now))

    async def _ask(self, now: datetime) -> WorkersPublic:
        where = f"Kafka at {self._settings.kafka_bootstrap_servers}"
        try:
            async with asyncio.timeout(self._timeout):
                while True:
                    try:
                        return await self._read(now)
                    except KafkaError as error:
                        # A coordinator not yet elected or loading (a fresh cluster creates
                        # its offsets topic on the first ask) answers in a moment.
                        if not getattr(error, "retriable", False):
                            raise
                        await asyncio.sleep(RETRY_SECONDS)
        except TimeoutError:
            raise KafkaUnavailable(f"{where} did not answer within {self._timeout:g}s") from None
        except (KafkaError, OSError) as error:
            raise KafkaUnavailable(f"{where} failed: {type(error).__name__}: {error}") from None

    async def _read(self, now: datetime) -> WorkersPublic:
        options = self._settings.kafka_client_options()
        group = group_id(self._settings)
        admin = AIOKafkaAdminClient(**options, request_timeout_ms=int(self._timeout * 1000))
        try:
            await admin.start()
            (response,) = await admin.describe_consumer_groups([group])
            described = response.to_object()["groups"][0]
            committed = await admin.list_consumer_group_offsets(group)
            members, topics = self._members(described)
            topics |= {tp.topic for tp in committed}
            described_topics = await admin.describe_topics(sorted(topics)) if topics else []
        finally:
            await admin.close()
        partitions = [
            TopicPartition(topic["topic"], number)
            for topic in sorted(described_topics, key=lambda t: t["topic"])
            if not topic["error_code"]
            for number in sorted(p["partition"] for p in topic["partitions"])
        ]
        ends = await _end_offsets(options, partitions) if partitions else {}
        return self._answer(group, described, members, partitions, committed, ends, now)

    @staticmethod
    def _members(described: dict[str, Any]) -> tuple[list[dict[str, Any]], set[str]]:
        members = []
        topics: set[str] = set()
        for member in described["members"]:
            topics.update(_decode_subscription(member["member_metadata"]))
            members.append(
                {
                    "member_id": member["member_id"],
                    "client_id": member["client_id"],
                    "client_host": member["client_host"].lstrip("/"),
                    "assigned": _decode_assignment(member["member_assignment"]),
                }
            )
        return members, topics

    def _answer(
        self,
        group: str,
        described: dict[str, Any],
        members: list[dict[str, Any]],
        partitions: list[TopicPartition],
        committed: dict[TopicPartition, Any],
        ends: dict[TopicPartition, int],
        now: datetime,
    ) -> WorkersPublic:
        owners = {
            (topic, partition): member["member_id"]
            for member in members
            for topic, partition in member["assigned"]
        }
        rows: dict[tuple[str, int], WorkerPartitionPublic] = {}
        for tp in partitions:
            offset = committed.get(tp)
            done = offset.offset if offset is not None and offset.offset >= 0 else None
            end = ends.get(tp)
            lag = None if end is None or _is_state(tp.topic) else max(0, end - (done or 0))
            rows[(tp.topic, tp.partition)] = WorkerPartitionPublic(
                topic=tp.topic,
                partition=tp.partition,
                owner=owners.get((tp.topic, tp.partition)),
                committed=done,
                end=end,
                lag=lag,
            )
        dispatch = (self._settings.topics.dispatch_queue, 0)
        by_member: dict[str, list[WorkerPartitionPublic]] = defaultdict(list)
        for key, row in rows.items():
            if row.owner is not None:
                by_member[row.owner].append(rows[key])
        public = [
            WorkerMemberPublic(
                member_id=member["member_id"],
                client_id=member["client_id"],
                client_host=member["client_host"],
                version=version_of(member["client_id"]),
                owns_dispatch=dispatch in member["assigned"],
                partitions=by_member[member["member_id"]],
                lag=sum(row.lag or 0 for row in by_member[member["member_id"]]),
            )
            for member in sorted(members, key=lambda m: (m["client_host"], m["member_id"]))
        ]
        return WorkersPublic(
            group_id=group,
            state=described["state"] or "Dead",  # Kafka names no state for a group it never saw.
            members=public,
            dispatch_owner=owners.get(dispatch),
            unassigned=[row for row in rows.values() if row.owner is None],
            lag=sum(row.lag or 0 for row in rows.values()),
            observed_at=now,
        )
