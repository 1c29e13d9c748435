"""Token secret rotation through the API: a token outlives a rotation that lists its secret
second, and is refused once its secret leaves the list."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from api.tokens import create_token
from kairos.floor.db import connect
from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import P, api_settings, bearer, prepare, running_api

pytestmark = pytest.mark.integration


def rotated(settings: Settings, secrets: str) -> Settings:
    """The same API (database, topics) with `KAIROS_TOKEN_SECRETS` set to `secrets`."""
    kept = settings.model_dump(exclude={"token_secret", "token_secrets"})
    return Settings.model_validate({**kept, "token_secrets": secrets})


async def test_a_token_works_while_its_secret_is_listed_and_stops_when_it_is_dropped(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    before = api_settings(
        bootstrap_servers,
        postgres_server,
        broker_kind,
        token_secret="old-secret",
        api_token_cache_seconds=0,
    )
    old_tokens = await prepare(before)
    old = old_tokens[Role.GUEST]
    during = rotated(before, "new-secret,old-secret")
    assert during.token_secret.get_secret_value() == "new-secret"
    async with await connect(during.database_url) as conn:
        # `kairos token create` signs with the settings' token secret: the newest.
        new = await create_token(
            conn,
            role=Role.GUEST,
            name="after-rotation",
            secret=during.token_secret.get_secret_value(),
        )
    after = rotated(before, "new-secret")

    async def answers(settings: Settings, *tokens: str) -> list[int]:
        async with running_api(settings) as client:
            return [
                (await client.get(f"{P}/hosts", headers=bearer(token))).status_code
                for token in tokens
            ]

    assert await answers(before, old, new) == [200, 401]
    assert await answers(during, old, new) == [200, 200]
    assert await answers(after, old, new) == [401, 200]
