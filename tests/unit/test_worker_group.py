"""How GET /workers reads the group coordinator's answer: owners, lag, version."""

from __future__ import annotations

from datetime import UTC, datetime

from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from api.worker_group import WorkerGroup, version_of
from kairos.floor.settings import Settings

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def test_version_is_read_from_the_end_of_the_client_id() -> None:
    assert version_of("faust-0.15.3") == "0.15.3"
    assert version_of("kairos-worker-1.2.0rc1") == "1.2.0rc1"
    assert version_of("kairos-worker-v1.2") == "1.2"
    assert version_of("kairos-worker-1.2.0-rc.1") == "1.2.0-rc.1"
    assert version_of("aiokafka") is None


def test_answer_names_owners_the_dispatch_owner_unassigned_partitions_and_lag() -> None:
    settings = Settings.model_validate(
        {"database_url": "postgresql://kairos@localhost/kairos", "topic_prefix": "p-"}
    )
    dispatch = settings.topics.dispatch_queue
    hosts, changelog = settings.topics.object_created, "p-kairos-hosts-changelog"
    members = [
        {"member_id": "m-1", "client_id": "faust-0.15.3", "client_host": "10.0.0.1",
         "assigned": [(hosts, 0), (dispatch, 0), (changelog, 0)]},
        {"member_id": "m-2", "client_id": "faust-0.15.3", "client_host": "10.0.0.2",
         "assigned": [(hosts, 1)]},
    ]  # fmt: skip
    partitions = [
        TopicPartition(t, p) for t, p in [(hosts, 0), (hosts, 1), (hosts, 2), (dispatch, 0),
                                          (changelog, 0)]
    ]  # fmt: skip
    committed = {
        TopicPartition(hosts, 0): OffsetAndMetadata(7, ""),
        TopicPartition(dispatch, 0): OffsetAndMetadata(3, ""),
    }
    ends = {tp: 10 for tp in partitions}
    group = WorkerGroup(settings, timeout=1.0)
    answer = group._answer(  # noqa: SLF001
        "p-kairos", {"state": "Stable"}, members, partitions, committed, ends, NOW
    )
    first, second = answer.members
    assert first.owns_dispatch and not second.owns_dispatch
    assert answer.dispatch_owner == "m-1"
    assert first.version == "0.15.3" and first.client_host == "10.0.0.1"
    by_topic = {(p.topic, p.partition): p for p in first.partitions}
    assert by_topic[(hosts, 0)].lag == 3 and by_topic[(dispatch, 0)].lag == 7
    # A changelog is read on recovery, never committed: no lag, and none counted.
    assert by_topic[(changelog, 0)].lag is None and first.lag == 10
    assert second.lag == 10  # Nothing committed: the whole partition is behind.
    assert [(p.topic, p.partition, p.owner) for p in answer.unassigned] == [(hosts, 2, None)]
    assert answer.lag == 3 + 7 + 10 + 10
