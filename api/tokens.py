"""Bearer tokens: stored hashed, each with one role."""

from __future__ import annotations

import hashlib
import secrets

import psycopg

from schemas.api import Role

TOKEN_PREFIX = "kairos_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def create_token(conn: psycopg.AsyncConnection, *, role: Role, name: str) -> str:
    """Store a new token for `role` and return it; only its hash is kept."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    await conn.execute(
        "INSERT INTO api_tokens (token_hash, name, role) VALUES (%s, %s, %s)",
        (hash_token(token), name, role.name),
    )
    await conn.commit()
    return token


async def role_of(conn: psycopg.AsyncConnection, token: str) -> Role | None:
    cursor = await conn.execute(
        "SELECT role FROM api_tokens WHERE token_hash = %s AND revoked_at IS NULL",
        (hash_token(token),),
    )
    row = await cursor.fetchone()
    return Role[row[0]] if row else None


async def caller_of(conn: psycopg.AsyncConnection, token: str) -> tuple[str, Role] | None:
    """(name, role) of a valid token; None when unknown or revoked."""
    cursor = await conn.execute(
        "SELECT name, role FROM api_tokens WHERE token_hash = %s AND revoked_at IS NULL",
        (hash_token(token),),
    )
    row = await cursor.fetchone()
    return (row[0], Role[row[1]]) if row else None


async def revoke_token(
    conn: psycopg.AsyncConnection, *, name: str | None = None, token: str | None = None
) -> int:
    """Revoke the token given, or every token with `name`; return how many were revoked.

    Revocation takes effect on the next request: the API looks tokens up on every call.
    """
    if (name is None) == (token is None):
        raise ValueError("give exactly one of name or token")
    if token is not None:
        where, value = "token_hash = %s", hash_token(token)
    else:
        where, value = "name = %s", name
    cursor = await conn.execute(
        f"UPDATE api_tokens SET revoked_at = now() WHERE {where} AND revoked_at IS NULL",
        (value,),
    )
    await conn.commit()
    return cursor.rowcount
