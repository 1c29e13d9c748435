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
