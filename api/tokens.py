"""Bearer tokens: signed with the token secret, stored hashed, each with one role and maybe
an expiry.

A token is `kairos_<random>.<signature>`, the signature an HMAC-SHA256 of the rest under
the token secret. Secrets rotate: `KAIROS_TOKEN_SECRETS` lists them newest first, new tokens
are signed by the first and a token signed by any of them is accepted, so tokens made before
a rotation keep working until their secret leaves the list. The API checks the signature
first, in memory: a made-up or mangled token is refused without touching the database. A
well-signed token is then looked up (name, role, revocation, expiry) and the answer is kept
for `KAIROS_API_TOKEN_CACHE_SECONDS`, so a revocation takes effect within that time; an
expiry is checked on every request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from schemas.api import Role

TOKEN_PREFIX = "kairos_"
MAX_TOKEN_LENGTH = 200
"""Longer bearer values are refused before any hashing: no token Kairos makes comes close."""
CACHE_MAX_ENTRIES = 10_000


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _signature(body: str, secret: str) -> str:
    digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sign(body: str, secret: str) -> str:
    """`body` with its signature appended."""
    return f"{body}.{_signature(body, secret)}"


def is_signed(token: str, secret: str) -> bool:
    """Whether `token` was made by a Kairos holding `secret` (constant-time comparison)."""
    if len(token) > MAX_TOKEN_LENGTH or not token.startswith(TOKEN_PREFIX):
        return False
    body, dot, signature = token.rpartition(".")
    if not dot:
        return False
    return hmac.compare_digest(signature.encode(), _signature(body, secret).encode())


def is_signed_by_any(token: str, secrets: Sequence[str]) -> bool:
    """Whether `token` was signed with one of `secrets` (each compared in constant time;
    every secret is tried, so the answer's timing does not tell which one matched)."""
    matches = [is_signed(token, secret) for secret in secrets]
    return any(matches)


_TTL = re.compile(r"(?P<amount>[1-9][0-9]{0,5})(?P<unit>[smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> timedelta:
    """`30d`, `12h`, `15m` or `90s` as a duration; ValueError with the accepted forms."""
    match = _TTL.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(
            f"invalid TTL {text!r}: give a whole number and a unit, s, m, h or d (e.g. 30d)"
        )
    return timedelta(seconds=int(match["amount"]) * _UNIT_SECONDS[match["unit"]])


@dataclass(frozen=True)
class TokenRecord:
    """What the database says about a token that is neither unknown nor revoked."""

    name: str
    role: Role
    expires_at: datetime | None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True)
class IssuedToken:
    token: str
    expires_at: datetime | None


async def issue_token(
    conn: psycopg.AsyncConnection,
    *,
    role: Role,
    name: str,
    secret: str,
    ttl: timedelta | None = None,
    actor: str = "system",
) -> IssuedToken:
    """Store a new token for `role` (expiring `ttl` from now, by the database's clock) and
    return it; only its hash is kept. The audit row naming `actor` is written with it."""
    token = sign(TOKEN_PREFIX + secrets.token_urlsafe(32), secret)
    cursor = await conn.execute(
        "INSERT INTO api_tokens (token_hash, name, role, expires_at)"
        " VALUES (%s, %s, %s, now() + %s::interval) RETURNING expires_at",
        (hash_token(token), name, role.name, ttl),
    )
    row = await cursor.fetchone()
    expires_at = row[0] if row else None
    summary = {"role": role.name, "expires_at": expires_at.isoformat() if expires_at else None}
    await _audit(conn, actor, "token.created", name, summary)
    await conn.commit()
    return IssuedToken(token, row[0] if row else None)


async def create_token(
    conn: psycopg.AsyncConnection,
    *,
    role: Role,
    name: str,
    secret: str,
    ttl: timedelta | None = None,
) -> str:
    """Store a new token for `role` and return it; only its hash is kept."""
    return (await issue_token(conn, role=role, name=name, secret=secret, ttl=ttl)).token


async def lookup(conn: psycopg.AsyncConnection, token: str) -> TokenRecord | None:
    """The token's record; None when unknown or revoked. Expiry is left to the caller."""
    cursor = await conn.execute(
        "SELECT name, role, expires_at FROM api_tokens"
        " WHERE token_hash = %s AND revoked_at IS NULL",
        (hash_token(token),),
    )
    row = await cursor.fetchone()
    return TokenRecord(row[0], Role[row[1]], row[2]) if row else None


async def role_of(conn: psycopg.AsyncConnection, token: str) -> Role | None:
    found = await caller_of(conn, token)
    return found[1] if found else None


async def caller_of(conn: psycopg.AsyncConnection, token: str) -> tuple[str, Role] | None:
    """(name, role) of a valid token; None when unknown, revoked or expired."""
    cursor = await conn.execute(
        "SELECT name, role FROM api_tokens WHERE token_hash = %s AND revoked_at IS NULL"
        " AND (expires_at IS NULL OR expires_at > now())",
        (hash_token(token),),
    )
    row = await cursor.fetchone()
    return (row[0], Role[row[1]]) if row else None


async def revoke_token(
    conn: psycopg.AsyncConnection,
    *,
    name: str | None = None,
    token: str | None = None,
    actor: str = "system",
) -> int:
    """Revoke the token given, or every token with `name`; return how many were revoked.
    Each revoked token gets an audit row naming `actor`, in the same transaction.

    A running API stops accepting it within its token cache time
    (`KAIROS_API_TOKEN_CACHE_SECONDS`).
    """
    if (name is None) == (token is None):
        raise ValueError("give exactly one of name or token")
    if token is not None:
        where, value = "token_hash = %s", hash_token(token)
    else:
        where, value = "name = %s", name
    cursor = await conn.execute(
        f"UPDATE api_tokens SET revoked_at = now() WHERE {where} AND revoked_at IS NULL"
        " RETURNING name",
        (value,),
    )
    revoked = [row[0] for row in await cursor.fetchall()]
    for revoked_name in revoked:
        await _audit(conn, actor, "token.revoked", revoked_name, {})
    await conn.commit()
    return len(revoked)


async def _audit(
    conn: psycopg.AsyncConnection, actor: str, kind: str, name: str, summary: dict[str, Any]
) -> None:
    """An audit row about the token named `name`, in the caller's transaction."""
    await conn.execute(
        "INSERT INTO audit (event_id, at, actor, type, subject_kind, subject_id, summary)"
        " VALUES (%s, now(), %s, %s, 'token', %s, %s::jsonb)",
        (uuid.uuid4(), actor[:255], kind, name, json.dumps(summary)),
    )


class TokenRefused(PermissionError):
    """The token is not signed by this Kairos, unknown, revoked or expired; says which."""


Lookup = Callable[[str], Awaitable[TokenRecord | None]]


class TokenVerifier:
    """Decides who a bearer token is, touching the database only for well-signed tokens.

    `secrets` are the token secrets in use, newest first (one string: the only one); a token
    signed with any of them is well-signed.

    Lookups (found or not) are kept per token hash for `cache_seconds`, at most
    `CACHE_MAX_ENTRIES` of them; only signed tokens get that far, so a flood of made-up
    tokens can neither reach the database nor grow the cache.
    """

    def __init__(
        self,
        secrets: str | Sequence[str],
        *,
        cache_seconds: float,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secrets = (secrets,) if isinstance(secrets, str) else tuple(secrets)
        if not self._secrets:
            raise ValueError("give at least one token secret")
        self._cache_seconds = cache_seconds
        self._wall_clock = wall_clock
        self._monotonic = monotonic
        self._cache: dict[str, tuple[float, TokenRecord | None]] = {}
        self.lookups = 0
        """Database lookups made so far (a figure for tests and metrics)."""

    async def verify(self, token: str, lookup: Lookup) -> TokenRecord:
        """The token's record, or TokenRefused; `lookup` is called on a cache miss only."""
        if not is_signed_by_any(token, self._secrets):
            raise TokenRefused("the bearer token is unknown or revoked")
        key = hash_token(token)
        now = self._monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            record = cached[1]
        else:
            self.lookups += 1
            record = await lookup(token)
            self._remember(key, now + self._cache_seconds, record)
        if record is None:
            raise TokenRefused("the bearer token is unknown or revoked")
        if record.expired(self._wall_clock()):
            assert record.expires_at is not None
            raise TokenRefused(
                f"the bearer token expired at {record.expires_at.astimezone(UTC).isoformat()}"
            )
        return record

    def _remember(self, key: str, until: float, record: TokenRecord | None) -> None:
        if self._cache_seconds <= 0:
            return
        if len(self._cache) >= CACHE_MAX_ENTRIES:
            now = self._monotonic()
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= CACHE_MAX_ENTRIES:
                self._cache.pop(next(iter(self._cache)))
        self._cache[key] = (until, record)
