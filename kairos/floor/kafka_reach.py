"""Why Kafka could not be reached, in words an operator can act on.

aiokafka reports every failed bootstrap as "Unable to bootstrap from [...]" and keeps the
cause (a refused password, an untrusted certificate) to its log. After such a failure the
edges ask `kafka_failure_reason`, which opens one connection to the first bootstrap server
exactly as the clients do and names what went wrong.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

from kairos.floor.settings import Settings


async def kafka_failure_reason(settings: Settings, timeout: float) -> str:
    """One phrase saying why a client with ``settings`` cannot use the first bootstrap server."""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    first = settings.kafka_bootstrap_servers.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    options = settings.kafka_client_options()
    with quiet_aiokafka():
        try:
            connection = await asyncio.wait_for(
                create_conn(
                    host.strip("[]") or "localhost",
                    int(port or 9092),
                    ssl_context=options.get("ssl_context"),
                    security_protocol=options["security_protocol"],
                    sasl_mechanism=options.get("sasl_mechanism", "PLAIN"),
                    sasl_plain_username=options.get("sasl_plain_username"),
                    sasl_plain_password=options.get("sasl_plain_password"),
                    request_timeout_ms=int(timeout * 1000),
                ),
                timeout,
            )
            try:
                # With TLS 1.3 the broker judges a client certificate after the handshake:
                # a refused one shows on the first request.
                await asyncio.wait_for(connection.send(MetadataRequest[0]([])), timeout)
            finally:
                connection.close()
        except Exception as error:  # noqa: BLE001 - whatever the client raised is described
            return describe_kafka_error(error, settings)
    return "the broker answers a lone connection, but the client could not bootstrap"


@contextmanager
def quiet_aiokafka() -> Iterator[None]:
    """Keep aiokafka's own log lines about a failed connection off stderr: the caller
    reports the failure once, in its own words (a command line tool prints one line)."""
    aiokafka_log = logging.getLogger("aiokafka")
    level = aiokafka_log.level
    aiokafka_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        aiokafka_log.setLevel(level)


def describe_kafka_error(error: BaseException, settings: Settings) -> str:
    """Name the first cause in ``error``'s chain that an operator can fix."""
    from aiokafka.errors import SaslAuthenticationFailed, UnsupportedSaslMechanismError

    protocol = settings.kafka_security_protocol.value
    for cause in _chain(error):
        if isinstance(cause, SaslAuthenticationFailed):
            return (
                f"SASL authentication failed for user {settings.kafka_sasl_username!r} "
                f"with {settings.kafka_sasl_mechanism} (check KAIROS_KAFKA_SASL_USERNAME "
                "and KAIROS_KAFKA_SASL_PASSWORD)"
            )
        if isinstance(cause, UnsupportedSaslMechanismError):
            return (
                f"the broker does not offer SASL mechanism {settings.kafka_sasl_mechanism} "
                "(check KAIROS_KAFKA_SASL_MECHANISM)"
            )
        if isinstance(cause, ssl.SSLCertVerificationError):
            return (
                f"TLS: the broker's certificate is not trusted "
                f"({getattr(cause, 'verify_message', None) or cause.reason or cause}; "
                "check KAIROS_KAFKA_SSL_CAFILE)"
            )
        if isinstance(cause, ssl.SSLError) and "ALERT" in str(cause.reason):
            # An alert is the broker's verdict on our side of the handshake: the certificate.
            return (
                f"TLS: the broker refused this client's certificate ({cause.reason}; check "
                "KAIROS_KAFKA_SSL_CERTFILE and _SSL_KEYFILE against the broker's truststore)"
            )
        if isinstance(cause, ssl.SSLError):
            return (
                f"TLS handshake failed ({cause.reason or cause}; check the CA and client "
                "certificate, KAIROS_KAFKA_SSL_*)"
            )
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (nothing listens there)"
        if isinstance(cause, TimeoutError):
            return "no answer within the connect timeout"
    if protocol == "SSL" and "closed" in str(error):
        return (
            "the broker closed the TLS connection: it may refuse this client's certificate "
            "(check KAIROS_KAFKA_SSL_CERTFILE and _SSL_KEYFILE against the broker's truststore)"
        )
    if "closed" in str(error):
        return (
            f"the broker closed the connection: it may not speak {protocol} on this port "
            "(check KAIROS_KAFKA_SECURITY_PROTOCOL)"
        )
    return f"{type(error).__name__}: {error}"


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
