"""The words an operator reads when Kafka refuses a client (kairos.floor.kafka_reach).

The same causes, raised by a real broker, are checked end to end in
tests/integration/test_secure_transport.py; here each cause is named, without a broker.
"""

from __future__ import annotations

import ssl

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from kairos.floor.kafka_reach import describe_kafka_error
from kairos.floor.settings import Settings


def settings(protocol: str = "SASL_SSL") -> Settings:
    return Settings.model_validate(
        {
            "kafka_bootstrap_servers": "broker:9094",
            "kafka_security_protocol": protocol,
            "kafka_sasl_username": "kairos",
            "kafka_sasl_password": "hunter2",
        }
    )


def wrapped(cause: BaseException) -> KafkaConnectionError:
    """As aiokafka raises it: a connection error whose cause is the real failure."""
    error = KafkaConnectionError("Connection at broker:9094 closed")
    error.__cause__ = cause
    return error


def ssl_error(reason: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason}] handshake")
    error.reason = reason
    return error


def untrusted_certificate() -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    error.verify_message = "self-signed certificate in certificate chain"
    return error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            SaslAuthenticationFailed("invalid credentials"),
            "SASL authentication failed for user 'kairos' with SCRAM-SHA-512",
        ),
        (UnsupportedSaslMechanismError(), "does not offer SASL mechanism SCRAM-SHA-512"),
        (
            wrapped(untrusted_certificate()),
            "the broker's certificate is not trusted (self-signed certificate in certificate chain",
        ),
        (
            wrapped(ssl_error("SSLV3_ALERT_CERTIFICATE_UNKNOWN")),
            "the broker refused this client's certificate (SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        ),
        (wrapped(ssl_error("WRONG_VERSION_NUMBER")), "TLS handshake failed (WRONG_VERSION_NUMBER"),
        (ConnectionRefusedError(111, "refused"), "connection refused"),
        (KafkaConnectionError("Connection at broker:9094 closed"), "may not speak SASL_SSL"),
    ],
)
def test_each_refusal_is_named_with_the_setting_to_check(
    error: BaseException, expected: str
) -> None:
    described = describe_kafka_error(error, settings())
    assert expected in described
    assert "\n" not in described and "hunter2" not in described


def test_a_closed_tls_connection_points_at_the_client_certificate() -> None:
    closed = KafkaConnectionError("Connection at broker:9094 closed")
    assert "refuse this client's certificate" in describe_kafka_error(closed, settings("SSL"))
