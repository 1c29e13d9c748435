"""Property-based tests from the OpenAPI document: no 5xx, every answer as documented.

Schemathesis drives the ASGI app in-process (it runs the app's lifespan itself) against a
real PostgreSQL read model and a real broker; writes really publish. Every generated case is
sent with each role's token: every answer must be documented and none a 5xx; a role below the
operation's gets 403 for valid input (invalid input may be refused with 422 first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import pytest_asyncio
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from api.main import create_app
from kairos.floor.clock import FrozenClock
from kairos.floor.db import connect
from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import (
    ENDPOINTS,
    T0,
    _template,
    api_settings,
    bearer,
    prepare,
    seed,
)
from tests.support.stack import chosen_broker

pytestmark = pytest.mark.integration

TOKENS: dict[Role, str] = {}
NEEDED: dict[tuple[str, str], Role | None] = {
    (method, _template(path)): needed for method, path, _, needed in ENDPOINTS
}
"""The lowest role each operation allows (None: no token needed), from the role matrix."""


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


MAX_EXAMPLES = 80
"""Cases per operation, each sent with all four roles' tokens (about a minute here)."""

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


def positive(case: Any) -> bool:
    generation = getattr(getattr(case, "meta", None), "generation", None)
    return generation is None or str(getattr(generation.mode, "value", "")) == "positive"


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,  # The same cases on every run: CI must not depend on the draw.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_answers_as_documented_to_every_role(case: Any, api_app: DeferredApp) -> None:
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
    # An import body is CSV or JSON lines inside a string: the schema can say "a string", not
    # "a header naming id, then one row per host", so a schema-valid made-up body is a 422.
    free_form_import = case.path.endswith("/hosts:import")
    # A scanner's PUT body may name the scanner, and must then name the path's: the schema
    # cannot say "equal to the path", so a made-up body naming another is rightly a 422.
    path_name = (case.path_parameters or {}).get("name")
    other_scanner = isinstance(case.body, dict) and case.path.endswith("/scanners/{name}")
    other_scanner = other_scanner and case.body.get("name", path_name) != path_name
    # Methods an operation does not have (schemathesis tries TRACE and the like) expect 405
    # from any caller; those and the open operations are sent once.
    needed = NEEDED.get((case.method.upper(), case.path))
    if case.path.startswith("/api/agents/") and chosen_broker() == "tansu":
        pytest.skip("the gateway's consumer group joins tansu too slowly (503); Apache proves it")
    if case.path.endswith("/commands:lease"):
        # A lease long-polls for `wait` seconds (30 by default) when no command comes, and
        # none does here: valid cases are sent with `wait=0`, so that each answers at once.
        # Negative cases are left out: one the API accepts (a body-less POST ignores a
        # Content-Type, as /toggle does) would hold the call past the client's timeout.
        if not positive(case):
            return
        case.query = {**(case.query or {}), "wait": 0}
    for role in Role if needed is not None else [Role.GUEST]:
        # The agents' gateway takes AGENT tokens only; every other operation a role and up.
        allowed = needed is None or (role is Role.AGENT if needed is Role.AGENT else role >= needed)
        # Valid data is rightly refused to a role below the operation's (403).
        refusable = (
            not allowed or made_up_cursor or free_form_schedule or free_form_import or other_scanner
        )
        # A negative case that left out the Authorization header is sent with a token here,
        # so it is no longer negative: schemathesis would call its 200 a defect.
        excluded = [positive_data_acceptance] if refusable else []
        if not positive(case) and not (case.headers or {}).get("Authorization"):
            excluded.append(negative_data_rejection)
        response = case.call_and_validate(
            headers=bearer(TOKENS[role]), excluded_checks=excluded or None
        )
        # The coverage phase also sends cases without the Authorization header: 401.
        sent_token = response.request.headers.get("Authorization") == f"Bearer {TOKENS[role]}"
        if needed is not None and not sent_token:
            assert response.status_code == 401, (role.name, case.method, case.path)
        elif not allowed:
            # Invalid input (the coverage phase's negative cases) may be refused with 422
            # before the role is looked at; valid input from a low role is refused with 403.
            refused = {403} if positive(case) else {403, 422}
            assert response.status_code in refused, (role.name, case.method, case.path)
