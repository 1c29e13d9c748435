"""A recorded history: every topic's records, the topics' layout and the consumer groups'
committed offsets, dumped from one broker and restored into another.

Plain aiokafka and the standard library only: `record.py` runs it under the release being
recorded, the replay tests under today's code.

Files of a history directory:
- `records.jsonl.gz`: one record a line (topic, partition, offset, timestamp, key, value,
  headers), in offset order per partition. Keys and values are text when they are UTF-8,
  else `{"b64": ...}`; a tombstone's value is null.
- `topics.json`: `meta` (release, prefix, app id, partitions, the scheduler time the
  recording ended at), `topics` (partitions and cleanup policy of each) and `groups` (each
  consumer group's committed offsets).
- `read_model.json`: the recording release's projector's rows (`record.py` writes it).
"""

from __future__ import annotations

import base64
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import OffsetAndMetadata

RECORDS = "records.jsonl.gz"
TOPICS = "topics.json"
READ_MODEL = "read_model.json"

Record = dict[str, Any]


def _encode(raw: bytes | None) -> str | dict[str, str] | None:
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(raw).decode()}


def decode_bytes(stored: str | dict[str, str] | None) -> bytes | None:
    if stored is None:
        return None
    if isinstance(stored, dict):
        return base64.b64decode(stored["b64"])
    return stored.encode()


def load_records(directory: Path) -> list[Record]:
    with gzip.open(directory / RECORDS, "rt") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load_topics(directory: Path) -> dict[str, Any]:
    return json.loads((directory / TOPICS).read_text())


async def _admin(bootstrap_servers: str) -> AIOKafkaAdminClient:
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=30_000)
    await client.start()
    return client


async def _cleanup_policies(client: AIOKafkaAdminClient, topics: list[str]) -> dict[str, str]:
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in topics]
    policies: dict[str, str] = {}
    for response in await client.describe_configs(resources):
        for resource in response.resources:
            _error, _message, _type, name, entries = resource[:5]
            for entry in entries:
                if entry[0] == "cleanup.policy":
                    policies[name] = entry[1]
    return policies


async def dump(bootstrap_servers: str, directory: Path, meta: dict[str, Any]) -> dict[str, int]:
    """Write every topic's records (but Kafka's own) and every group's offsets under
    `directory`; returns the record count per topic."""
    client = await _admin(bootstrap_servers)
    try:
        names = sorted(name for name in await client.list_topics() if not name.startswith("__"))
        described = await client.describe_topics(names)
        partitions = {
            topic["topic"]: len(topic["partitions"])
            for topic in described
            if not topic["error_code"]
        }
        policies = await _cleanup_policies(client, names)
        groups: dict[str, dict[str, dict[str, int]]] = {}
        for group_id, *_ in await client.list_consumer_groups():
            offsets = await client.list_consumer_group_offsets(group_id)
            by_topic: dict[str, dict[str, int]] = defaultdict(dict)
            for partition, committed in sorted(offsets.items()):
                by_topic[partition.topic][str(partition.partition)] = committed.offset
            groups[group_id] = dict(by_topic)
    finally:
        await client.close()

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    records: list[Record] = []
    try:
        for topic in names:
            assigned = [TopicPartition(topic, p) for p in range(partitions[topic])]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            ends = await consumer.end_offsets(assigned)
            for partition in assigned:
                while await consumer.position(partition) < ends[partition]:
                    batch = await consumer.getmany(partition, timeout_ms=1000)
                    for message in batch.get(partition, []):
                        records.append(
                            {
                                "topic": topic,
                                "partition": message.partition,
                                "offset": message.offset,
                                "timestamp": message.timestamp,
                                "key": _encode(message.key),
                                "value": _encode(message.value),
                                "headers": [[k, _encode(v)] for k, v in message.headers],
                            }
                        )
    finally:
        await consumer.stop()

    directory.mkdir(parents=True, exist_ok=True)
    with gzip.open(directory / RECORDS, "wt", compresslevel=9) as out:
        for record in records:
            out.write(json.dumps(record, sort_keys=True) + "\n")
    layout = {
        "meta": meta,
        "topics": {
            name: {"partitions": partitions[name], "cleanup_policy": policies.get(name, "delete")}
            for name in names
        },
        "groups": groups,
    }
    (directory / TOPICS).write_text(json.dumps(layout, indent=1, sort_keys=True) + "\n")
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        counts[record["topic"]] += 1
    return dict(counts)


async def restore(
    bootstrap_servers: str, directory: Path, *, groups: set[str] | None = None
) -> None:
    """Create the recorded topics, produce the records to their own partitions in order, with
    their own keys, timestamps and headers, and commit the offsets of `groups` (all recorded
    groups when None), mapped onto the new offsets."""
    layout = load_topics(directory)
    records = load_records(directory)
    client = await _admin(bootstrap_servers)
    try:
        await client.create_topics(
            [
                NewTopic(
                    name,
                    spec["partitions"],
                    1,
                    topic_configs={"cleanup.policy": spec["cleanup_policy"]},
                )
                for name, spec in layout["topics"].items()
            ]
        )
    finally:
        await client.close()

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=5
    )
    await producer.start()
    new_offsets: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    try:
        sent = []
        for record in records:
            future = await producer.send(
                record["topic"],
                decode_bytes(record["value"]),
                key=decode_bytes(record["key"]),
                partition=record["partition"],
                timestamp_ms=record["timestamp"],
                headers=[(k, decode_bytes(v) or b"") for k, v in record["headers"]],
            )
            sent.append((record, future))
        for record, future in sent:
            metadata = await future
            new_offsets[(record["topic"], record["partition"])].append(
                (record["offset"], metadata.offset)
            )
    finally:
        await producer.stop()

    for group_id, by_topic in layout["groups"].items():
        if groups is not None and group_id not in groups:
            continue
        committed: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic, by_partition in by_topic.items():
            for partition, offset in by_partition.items():
                pairs = new_offsets.get((topic, int(partition)), [])
                # The committed offset is the next one to read: as many records precede it.
                mapped = sum(1 for old, _new in pairs if old < offset)
                committed[TopicPartition(topic, int(partition))] = OffsetAndMetadata(mapped, "")
        if committed:
            await _commit(bootstrap_servers, group_id, committed)


async def _commit(
    bootstrap_servers: str, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]
) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers, group_id=group_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()
