"""The console's audit page and dead-letter redrive, in a real headless Chromium against a
real worker, PostgreSQL and API (the helpers of test_console.py)."""

from __future__ import annotations

import json

import pytest

from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import P, bearer, prepare, running_api
from tests.integration.test_api_worker import eventually
from tests.integration.test_console import _chromium, chromium, serving, shown, sign_in
from tests.support.factories import host_created
from tests.support.kafka import publish, start_producer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ADMIN_NAME = "tester-security_admin"


async def test_console_redrives_a_dead_letter_and_shows_who_changed_what(
    settings: Settings, workers
) -> None:
    _chromium()  # Skip before starting anything when there is no browser.
    tokens = await prepare(settings)
    workers(settings)
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    fixed = json.loads(host_created("fixed-2").model_dump_json())
    broken = {key: value for key, value in fixed.items() if key != "occurred_at"}
    producer = await start_producer(settings)
    try:
        await publish(
            producer, settings.topics.object_created, "fixed-2", json.dumps(broken).encode()
        )
    finally:
        await producer.stop()
    async with running_api(settings) as client:
        await eventually(client, f"{P}/dead-letters", admin, lambda body: body["count"] == 1)
        response = await client.post(
            f"{P}/hosts", json={"host_id": "web-7"}, headers=admin, params={"wait": "true"}
        )
        assert response.status_code == 200, response.text
        await eventually(
            client,
            f"{P}/audit",
            admin,
            lambda body: body["count"] >= 1,
            params={"subject": "web-7"},
        )
    from selenium.webdriver.common.by import By

    with serving(settings) as base, chromium() as driver:
        # A guest sees neither the audit link nor the page's rows.
        sign_in(driver, base, tokens[Role.GUEST])
        assert not driver.find_elements(By.CSS_SELECTOR, "a[href='#/audit']:not([hidden])")
        driver.get(f"{base}/#/audit")
        shown(driver, ".notice.error", lambda element: "SECURITY_ANALYST" in element.text)
        shown(driver, "#sign-out").click()

        sign_in(driver, base, tokens[Role.SECURITY_ADMIN])
        driver.get(f"{base}/#/dead-letters")
        shown(driver, "h1", lambda element: element.text == "Dead letters (1)")
        shown(driver, "button.edit-redrive").click()
        editor = shown(driver, "textarea.redrive-body")
        editor.clear()
        editor.send_keys(json.dumps(broken))
        shown(driver, "button.redrive-edited").click()
        # The contract check answers first: the missing field is named.
        shown(driver, "#action-result", lambda element: "occurred_at" in element.text)
        editor = shown(driver, "textarea.redrive-body")
        editor.clear()
        editor.send_keys(json.dumps(fixed))
        shown(driver, "button.redrive-edited").click()
        shown(driver, "#action-result", lambda element: "Redriven to" in element.text)
        shown(driver, "table", lambda element: f"redriven by {ADMIN_NAME}" in element.text)
        assert shown(driver, "button.redrive").text == "Redrive again"

        driver.get(f"{base}/#/hosts/web-7")
        changes = shown(driver, "#latest-changes", lambda element: "host.created" in element.text)
        assert ADMIN_NAME in changes.text

        driver.get(f"{base}/#/audit")
        shown(driver, "h1", lambda element: element.text.startswith("Audit ("))
        form = shown(driver, "#audit-filters")
        form.find_element(By.NAME, "type").send_keys("dead_letter.redriven")
        form.find_element(By.CSS_SELECTOR, "button").click()
        rows = shown(driver, "table", lambda element: "dead_letter.redriven" in element.text)
        assert ADMIN_NAME in rows.text and "host.created" not in rows.text
        shown(driver, "h1", lambda element: element.text == "Audit (1)")

    # The redriven host reached the read model.
    async with running_api(settings) as client:
        host = await eventually(client, f"{P}/hosts/fixed-2", admin, lambda body: True)
    assert host["host_id"] == "fixed-2"
