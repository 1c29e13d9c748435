"""Token signatures, TTLs and the verifier's cache, with a counting in-memory lookup."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from api.tokens import (
    CACHE_MAX_ENTRIES,
    TOKEN_PREFIX,
    TokenRecord,
    TokenRefused,
    TokenVerifier,
    is_signed,
    is_signed_by_any,
    parse_ttl,
    sign,
)
from kairos.floor.settings import DEV_TOKEN_SECRET, Environment, Settings
from schemas.api import Role

SECRET = "unit-secret"
NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_ttl_takes_a_whole_number_and_a_unit(text: str, expected: timedelta) -> None:
    assert parse_ttl(text) == expected


@pytest.mark.parametrize("text", ["", "30", "d", "0d", "-1d", "1.5h", "30w", "1d2h", "9999999s"])
def test_ttl_refuses_anything_else_naming_the_units(text: str) -> None:
    with pytest.raises(ValueError, match="s, m, h or d"):
        parse_ttl(text)


def test_only_tokens_signed_with_the_secret_pass_the_signature_check() -> None:
    token = sign(TOKEN_PREFIX + "abc", SECRET)
    assert is_signed(token, SECRET)
    assert not is_signed(token, "another-secret")
    assert not is_signed(token[:-1] + ("A" if token[-1] != "A" else "B"), SECRET)
    assert not is_signed(TOKEN_PREFIX + "abc", SECRET)  # unsigned, as tokens once were
    assert not is_signed(sign("other_abc", SECRET), SECRET)
    assert not is_signed(sign(TOKEN_PREFIX + "x" * 300, SECRET), SECRET)


def test_a_token_signed_by_any_listed_secret_passes_the_signature_check() -> None:
    old = sign(TOKEN_PREFIX + "old", "old-secret")
    new = sign(TOKEN_PREFIX + "new", "new-secret")
    assert is_signed_by_any(old, ["new-secret", "old-secret"])
    assert is_signed_by_any(new, ["new-secret", "old-secret"])
    assert not is_signed_by_any(old, ["new-secret"])
    assert not is_signed_by_any(old, [])


class CountingLookup:
    def __init__(self, records: dict[str, TokenRecord]) -> None:
        self.records = records
        self.calls = 0

    async def __call__(self, token: str) -> TokenRecord | None:
        self.calls += 1
        return self.records.get(token)


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def verifier(ticks: Ticks, *, cache_seconds: float = 30.0, wall: datetime = NOW) -> TokenVerifier:
    return TokenVerifier(
        SECRET, cache_seconds=cache_seconds, wall_clock=lambda: wall, monotonic=ticks
    )


def test_unsigned_or_forged_tokens_never_reach_the_lookup() -> None:
    lookup = CountingLookup({})
    check = verifier(Ticks())
    for token in ["", "x", TOKEN_PREFIX + "abc", sign(TOKEN_PREFIX + "abc", "wrong")]:
        with pytest.raises(TokenRefused, match="unknown or revoked"):
            asyncio.run(check.verify(token, lookup))
    assert lookup.calls == 0 and check.lookups == 0


def test_a_signed_token_is_looked_up_once_per_cache_time_found_or_not() -> None:
    known, unknown = sign(TOKEN_PREFIX + "known", SECRET), sign(TOKEN_PREFIX + "gone", SECRET)
    lookup = CountingLookup({known: TokenRecord("alice", Role.GUEST, None)})
    ticks = Ticks()
    check = verifier(ticks, cache_seconds=30)
    for _ in range(3):
        assert asyncio.run(check.verify(known, lookup)).name == "alice"
        with pytest.raises(TokenRefused):
            asyncio.run(check.verify(unknown, lookup))
    assert lookup.calls == 2
    ticks.now = 30.0  # the cache time has passed: a revocation now shows
    del lookup.records[known]
    with pytest.raises(TokenRefused, match="unknown or revoked"):
        asyncio.run(check.verify(known, lookup))
    assert lookup.calls == 3


def test_without_a_cache_time_every_request_looks_up() -> None:
    token = sign(TOKEN_PREFIX + "t", SECRET)
    lookup = CountingLookup({token: TokenRecord("bob", Role.SUPER_ADMIN, None)})
    check = verifier(Ticks(), cache_seconds=0)
    for _ in range(3):
        asyncio.run(check.verify(token, lookup))
    assert lookup.calls == 3


def test_an_expired_token_is_refused_even_while_cached() -> None:
    token = sign(TOKEN_PREFIX + "t", SECRET)
    expires = NOW + timedelta(seconds=5)
    lookup = CountingLookup({token: TokenRecord("ci", Role.GUEST, expires)})
    wall = {"now": NOW}
    check = TokenVerifier(
        SECRET, cache_seconds=30, wall_clock=lambda: wall["now"], monotonic=Ticks()
    )
    assert asyncio.run(check.verify(token, lookup)).role is Role.GUEST
    wall["now"] = expires
    with pytest.raises(TokenRefused, match="expired at 2030-01-01T12:00:05"):
        asyncio.run(check.verify(token, lookup))
    assert check.lookups == 1


def test_the_cache_stays_bounded() -> None:
    lookup = CountingLookup({})
    check = verifier(Ticks())
    for number in range(CACHE_MAX_ENTRIES + 10):
        with pytest.raises(TokenRefused):
            asyncio.run(check.verify(sign(f"{TOKEN_PREFIX}{number}", SECRET), lookup))
    assert len(check._cache) <= CACHE_MAX_ENTRIES


def test_every_route_that_needs_a_caller_authenticates_before_reading_its_body() -> None:
    from fastapi.routing import APIRoute

    from api.deps import AuthenticatedRoute, _needs_caller
    from api.routes import health, hosts, jobs, operations, scheduler

    routes = [
        route
        for module in (health, hosts, jobs, operations, scheduler)
        for route in module.router.routes
        if isinstance(route, APIRoute)
    ]
    protected = [r for r in routes if _needs_caller(r.dependant)]
    assert len(protected) >= 20
    assert all(isinstance(r, AuthenticatedRoute) for r in protected), [
        r.path for r in protected if not isinstance(r, AuthenticatedRoute)
    ]
    assert {r.path for r in routes if not _needs_caller(r.dependant)} == {
        "/healthz",
        "/readyz",
        "/metrics",
    }


def test_a_rotation_keeps_old_tokens_until_their_secret_is_dropped() -> None:
    old = sign(TOKEN_PREFIX + "before", "old-secret")
    new = sign(TOKEN_PREFIX + "after", "new-secret")
    lookup = CountingLookup(
        {
            old: TokenRecord("ci", Role.GUEST, None),
            new: TokenRecord("ops", Role.SECURITY_ADMIN, None),
        }
    )
    before = TokenVerifier("old-secret", cache_seconds=0, wall_clock=lambda: NOW)
    during = TokenVerifier(["new-secret", "old-secret"], cache_seconds=0, wall_clock=lambda: NOW)
    after = TokenVerifier(["new-secret"], cache_seconds=0, wall_clock=lambda: NOW)
    assert asyncio.run(before.verify(old, lookup)).name == "ci"
    with pytest.raises(TokenRefused):
        asyncio.run(before.verify(new, lookup))
    assert asyncio.run(during.verify(old, lookup)).name == "ci"
    assert asyncio.run(during.verify(new, lookup)).name == "ops"
    with pytest.raises(TokenRefused, match="unknown or revoked"):
        asyncio.run(after.verify(old, lookup))
    assert after.lookups == 0  # refused on the signature alone
    assert asyncio.run(after.verify(new, lookup)).name == "ops"


def test_a_verifier_needs_a_secret() -> None:
    with pytest.raises(ValueError, match="at least one"):
        TokenVerifier([], cache_seconds=0)


def test_the_single_secret_setting_is_a_list_of_one() -> None:
    settings = Settings.model_validate({"token_secret": "only"})
    assert settings.token_secret_values() == ("only",)
    assert settings.token_secret.get_secret_value() == "only"


def test_token_secrets_sign_with_the_first_and_accept_every_one() -> None:
    settings = Settings.model_validate({"token_secrets": " new , old,, "})
    assert settings.token_secret_values() == ("new", "old")
    assert settings.token_secret.get_secret_value() == "new"  # what `token create` signs with
    kept = Settings.model_validate({"token_secret": "old", "token_secrets": "new,old"})
    assert kept.token_secret.get_secret_value() == "new"
    unset = Settings.model_validate({"token_secret": "only", "token_secrets": " "})
    assert unset.token_secret_values() == ("only",)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"token_secrets": " , "}, "names no secret"),
        ({"token_secret": "other", "token_secrets": "new,old"}, "not among"),
        ({"env": Environment.PROD, "token_secrets": f"new,{DEV_TOKEN_SECRET}"}, "outside dev"),
        ({"env": Environment.PROD}, "outside dev"),
    ],
)
def test_token_secret_settings_that_make_no_sense_are_refused(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.model_validate(values)


def test_token_secrets_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAIROS_TOKEN_SECRET", raising=False)
    monkeypatch.setenv("KAIROS_TOKEN_SECRETS", "fresh,previous")
    settings = Settings()
    assert settings.token_secret_values() == ("fresh", "previous")
    assert settings.token_secret.get_secret_value() == "fresh"
