"""Local infrastructure for development and tests: Apache Kafka (KRaft, 1 or 3 nodes),
a memory-only Tansu broker and an embedded PostgreSQL, all on 127.0.0.1.

Every service runs as a child process in its own process group, logs to a file,
and is stopped by ``stop()``, by leaving its context manager, or at interpreter exit.
"""

from kairos.localstack.apache import (
    KAFKA_VERSION,
    ApacheKafkaCluster,
    fetch_kafka_jars,
    java_and_maven_available,
)
from kairos.localstack.errors import LocalStackError
from kairos.localstack.ports import free_port, wait_for_port
from kairos.localstack.postgres import LocalPostgres
from kairos.localstack.tansu import TansuBroker, tansu_available

__all__ = [
    "KAFKA_VERSION",
    "ApacheKafkaCluster",
    "LocalPostgres",
    "LocalStackError",
    "TansuBroker",
    "fetch_kafka_jars",
    "free_port",
    "java_and_maven_available",
    "tansu_available",
    "wait_for_port",
]
