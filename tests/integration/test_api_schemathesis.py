"""Property-based tests from the OpenAPI document: no 5xx, every answer as documented.

Schemathesis drives the ASGI app in-process (it runs the app's lifespan itself) against a
real PostgreSQL read model and a real broker; writes really publish.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import pytest_asyncio
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from api.main import create_app
from kairos.clock import FrozenClock
from kairos.db import connect
from kairos.settings import Settings
from schemas.api import Role
from tests.integration.test_api import T0, api_settings, bearer, prepare, seed

pytestmark = pytest.mark.integration

TOKENS: dict[Role, str] = {}


class DeferredApp:
    """The ASGI app under test, known at import for its schema, wired to a database later.

    Schemathesis builds its tests when the module is imported, before any fixture has made
    a broker topic or a database; the fixture below points this at the real app then.
    """

    def __init__(self) -> None:
        self.target: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.target is not None, "the api_app fixture did not run"
        await self.target(scope, receive, send)


APP = DeferredApp()
schema = schemathesis.openapi.from_dict(create_app(Settings.model_construct()).openapi())
schema.app = APP


@pytest_asyncio.fixture(scope="module")
async def api_app(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> DeferredApp:
    api = api_settings(bootstrap_servers, postgres_server, broker_kind)
    TOKENS.update(await prepare(api))
    async with await connect(api.database_url) as conn:
        await seed(conn)
    # Nothing projects here, so `?wait=true` would always wait in full: keep that short.
    APP.target = create_app(api, clock=FrozenClock(T0), wait_seconds=0.0)
    return APP


@schema.parametrize()
@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,  # The same cases on every run: CI must not depend on the draw.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_answers_as_documented(case: Any, api_app: DeferredApp) -> None:
    # A cursor is opaque: the schema can say what characters it has, not which strings this
    # API gave out, so a schema-valid made-up cursor is rightly refused with 422.
    made_up_cursor = "cursor" in (case.query or {})
    # A schedule body is typed by the Schedule model, but its recurrence rules (a cron field's
    # range, an RRULE that never fires, a timezone's name) are more than a JSON Schema can
    # express: a schema-valid made-up body is rightly a 422.
    free_form_schedule = case.path.startswith("/api/scheduled-jobs") and case.method in (
        "POST",
        "PATCH",
    )
    case.call_and_validate(
        headers=bearer(TOKENS[Role.SUPER_ADMIN]),
        excluded_checks=[positive_data_acceptance]
        if made_up_cursor or free_form_schedule
        else None,
    )
