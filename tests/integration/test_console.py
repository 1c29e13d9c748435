"""The web console in a real headless Chromium, against a real worker, PostgreSQL and API.

Debian's `chromium` and `chromium-driver` are driven by selenium; scripts/setup.sh installs
them in CI. Elsewhere the test is skipped when they are missing, never in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from api.main import create_app
from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import P, bearer, closed_port, prepare
from tests.integration.test_api_worker import eventually
from tests.support.agents import ScannerFleet
from tests.support.factories import host_created
from tests.support.kafka import publish, start_producer
from tests.support.scanners import put_scanners

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console.png"
J = "/api/scheduled-jobs"
SCORES = {"web-1": 100.0, "web-2": 92.0, "db-1": 75.0, "db-2": 35.0, "mail-1": 10.0}
"""One host per compliance state; `edge-1` fails its scan."""
WAIT = 20


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    if os.environ.get("CI") == "true":
        pytest.fail("CI must run the console test: scripts/setup.sh installs chromium here")
    pytest.skip("no chromium + chromedriver (apt-get install chromium chromium-driver)")


@contextmanager
def serving(settings: Settings) -> Iterator[str]:
    """The API on a real local port (uvicorn in a thread), for the browser to reach."""
    port = closed_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    started = time.monotonic()
    while not server.started:
        assert thread.is_alive() and time.monotonic() - started < WAIT, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT)


@contextmanager
def chromium() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,1100", "--disable-gpu"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def shown(driver: Any, css: str, holds: Callable[[Any], bool] = lambda element: True) -> Any:
    """The first element matching `css` once `holds(element)`; fails after WAIT seconds."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    started = time.monotonic()
    while True:
        try:
            for element in driver.find_elements(By.CSS_SELECTOR, css):
                if element.is_displayed() and holds(element):
                    return element
        except StaleElementReferenceException:
            pass  # The view re-rendered under us; look again.
        if time.monotonic() - started > WAIT:
            body = driver.find_element(By.TAG_NAME, "body").text[:2000]
            raise AssertionError(f"{css} never showed as expected; the page says:\n{body}")
        time.sleep(0.1)


def sign_in(driver: Any, base: str, token: str) -> None:
    driver.get(f"{base}/")
    field = shown(driver, "#token")
    field.send_keys(token)
    shown(driver, "#sign-in button").click()
    shown(driver, "#who", lambda element: "Sign out" in element.text)


async def _seed_fleet(settings: Settings, admin: dict[str, str]) -> None:
    """Six hosts scanned once each by simulated scanners: a fleet in every state."""

    def score_for(command: dict[str, Any]) -> float | None:
        return SCORES.get(command["host_id"])

    producer = await start_producer(settings)
    try:
        for host_id in [*SCORES, "edge-1"]:
            labels = {"env": "prod" if host_id.startswith("web") else "lab"}
            event = host_created(host_id, organization="acme", labels=labels)
            await publish(producer, settings.topics.object_created, host_id, event)
    finally:
        await producer.stop()
    app = create_app(settings)
    async with app.router.lifespan_context(app), ScannerFleet(settings, score_for=score_for):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos") as client:
            await put_scanners(client, admin, "nmap")  # the schedules' scanner, registered
            for host_id in [*SCORES, "edge-1"]:
                await eventually(
                    client,
                    f"{P}/hosts/{host_id}",
                    admin,
                    lambda body: body["latest_scan"] is not None,
                    timeout=60,
                )


async def test_console_shows_the_fleet_and_creates_and_toggles_a_schedule(
    settings: Settings, workers
) -> None:
    _chromium()  # Skip before starting anything when there is no browser.
    tokens = await prepare(settings)
    workers(settings)
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    await _seed_fleet(settings, admin)
    from selenium.webdriver.common.by import By

    with serving(settings) as base, chromium() as driver:
        # Swagger UI renders from packaged assets (this browser's page loads nothing else).
        driver.get(f"{base}/docs")
        shown(driver, ".swagger-ui .info .title", lambda element: "Kairos" in element.text)

        # A guest sees the data but none of the actions.
        sign_in(driver, base, tokens[Role.GUEST])
        shown(driver, "#fleet-cards", lambda element: "6\nhosts" in element.text)
        driver.get(f"{base}/#/schedules")
        shown(driver, "h1", lambda element: element.text.startswith("Schedules"))
        assert not driver.find_elements(By.CSS_SELECTOR, "#new-schedule")
        assert not driver.find_elements(By.CSS_SELECTOR, "a[href='#/dead-letters']:not([hidden])")
        driver.get(f"{base}/#/hosts/edge-1")
        shown(driver, "h1", lambda element: element.text.startswith("Host edge-1"))
        for action in ("#force-scan", "#deactivate-host", "#delete-host", "#confirm-delete"):
            assert not driver.find_elements(By.CSS_SELECTOR, action), action
        driver.get(f"{base}/#/scanners")
        shown(driver, "#scanners", lambda element: "nmap" in element.text)
        for action in (".switch-scanner", ".edit-scanner", "#scanner-form"):
            assert not driver.find_elements(By.CSS_SELECTOR, action), action
        shown(driver, "#sign-out").click()

        sign_in(driver, base, tokens[Role.SECURITY_ADMIN])
        cards = shown(
            driver,
            "#fleet-cards",
            lambda element: "6\nhosts" in element.text and " commands" in element.text,
        )
        assert "in flight / cap" in cards.text and "dead letters" in cards.text
        # The seeded hosts' commands went out moments ago: their lateness is measured.
        lateness = r"[\d.]+ s\ndispatch lateness, p99\np50 [\d.]+ s, max [\d.]+ s, last \d+ "
        assert re.search(lateness, cards.text), cards.text
        shown(driver, "table", lambda element: "critical" in element.text)
        # mail-1 scored 10: critical, and alerted as such.
        alerts = shown(driver, "table", lambda element: "became_critical" in element.text)
        assert "mail-1 is critical (score 10)" in alerts.text
        assert "alerts firing" in shown(driver, "#fleet-cards").text
        # Recent failures: edge-1's scan failed.
        shown(driver, "a[href='#/hosts/edge-1']", lambda element: element.text == "edge-1")

        driver.get(f"{base}/#/hosts?state=critical")
        shown(driver, "h1", lambda element: element.text == "Hosts (1)")
        shown(driver, "a[href='#/hosts/mail-1']").click()
        shown(driver, "h1", lambda element: element.text.startswith("Host mail-1"))
        assert shown(driver, "#force-scan").is_enabled()

        # A bad expression: the API's 422 shows next to the recurrence field.
        driver.get(f"{base}/#/schedules/new")
        form = shown(driver, "#schedule-form")
        form.find_element(By.NAME, "name").send_keys("nightly-web")
        form.find_element(By.NAME, "scanner").send_keys("nmap")
        expression = form.find_element(By.NAME, "expression")
        expression.send_keys("61 3 * * *")
        form.find_element(By.NAME, "filter").send_keys(
            '{"field": "labels.env", "op": "eq", "value": "prod"}'
        )
        shown(driver, "#save-schedule").click()
        error = shown(driver, "#error-recurrence", lambda element: "out of range" in element.text)
        assert "61" in error.text

        expression.clear()
        expression.send_keys("0 3 * * *")
        shown(driver, "#save-schedule").click()
        shown(driver, "h1", lambda element: element.text.startswith("Schedule nightly-web"))
        assert len(shown(driver, "#next-fire-times").find_elements(By.TAG_NAME, "li")) == 5
        # Run now: the worker runs it over the two prod hosts; the history shows the run.
        shown(driver, "#run-now").click()
        shown(driver, "#action-result", lambda element: "Run requested" in element.text)
        started = time.monotonic()
        while "1 in flight" not in shown(driver, "#runs p").text:
            assert time.monotonic() - started < WAIT, shown(driver, "#runs").text
            time.sleep(0.5)
            driver.refresh()
        run = shown(driver, "#runs tbody tr").find_elements(By.TAG_NAME, "td")
        assert [cell.text for cell in run[3:6]] == ["fired", "2", "2"]  # outcome, hosts, commands

        driver.get(f"{base}/#/schedules")
        toggle = shown(driver, "input.toggle[data-name='nightly-web']")
        assert toggle.is_selected()
        toggle.click()
        # The page re-reads the schedule until the projection shows the change.
        row = shown(
            driver,
            "#schedules tbody tr",
            lambda element: "nightly-web" in element.text and "disabled" in element.text,
        )
        assert "labels.env" in row.text
        assert not shown(driver, "input.toggle[data-name='nightly-web']").is_selected()

        # The forecast: a chart of 48 hours (one bar each) and what it says of the promise.
        driver.get(f"{base}/#/forecast")
        headline = shown(driver, "#forecast-headline", lambda element: "promise" in element.text)
        assert len(driver.find_elements(By.CSS_SELECTOR, "#forecast-chart rect.due")) == 48
        assert driver.find_elements(By.CSS_SELECTOR, "#forecast-chart polyline.capacity")
        forecast_says_kept = "keeps" in headline.text

        driver.get(f"{base}/#/")
        shown(driver, "#fleet-cards", lambda element: "6\nhosts" in element.text)
        shown(driver, "table", lambda element: "critical" in element.text)
        driver.save_screenshot(str(SCREENSHOT))

        # edge-1 deactivated, reactivated and deleted from its page; each waits for the
        # projection, then the page shows the host as it now is.
        driver.get(f"{base}/#/hosts/edge-1")
        shown(driver, "h1", lambda element: element.text.startswith("Host edge-1"))
        shown(driver, "#deactivate-host").click()
        shown(driver, "table", lambda element: "status inactive / up" in element.text)
        assert "Deactivated" in shown(driver, "#action-result").text
        shown(driver, "#reactivate-host").click()
        shown(driver, "table", lambda element: "status active / up" in element.text)
        assert "Reactivated" in shown(driver, "#action-result").text
        shown(driver, "#deactivate-host")
        assert not driver.find_element(By.CSS_SELECTOR, "#confirm-delete").is_displayed()
        shown(driver, "#delete-host").click()
        shown(driver, "#confirm-delete", lambda element: "edge-1" in element.text).click()
        shown(driver, "h1", lambda element: element.text == "Hosts (5)")

        # The scanner registry: compliance first, nmap's pool edited, then nmap switched off.
        driver.get(f"{base}/#/scanners")
        rows = shown(driver, "#scanners tbody", lambda element: "nmap" in element.text)
        names = [row.text.split()[0] for row in rows.find_elements(By.TAG_NAME, "tr")]
        assert names == ["compliance", "nmap"], names
        driver.get(f"{base}/#/scanners?edit=nmap")
        form = shown(driver, "#scanner-form", lambda element: "Edit nmap" in element.text)
        pool = form.find_element(By.NAME, "max_concurrent")
        pool.clear()
        pool.send_keys("3")
        shown(driver, "#save-scanner").click()
        shown(driver, "#action-result", lambda element: "nmap saved" in element.text)
        shown(driver, "#scanners tbody", lambda e: re.search(r"nmap\s+active\s+\d+ / 3\b", e.text))
        shown(driver, "button.switch-scanner[data-name='nmap']").click()
        shown(driver, "#action-result", lambda element: "deactivated" in element.text)
        row = shown(driver, "#scanners tbody", lambda e: re.search(r"nmap\s+inactive", e.text))
        assert "Activate" in row.text

    # The browser's changes, checked against the API itself.
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos") as client:
            job = (await client.get(f"{J}/nightly-web", headers=admin)).json()
            forecast = (await client.get(f"{P}/forecast", headers=admin)).json()
            deleted = await client.get(f"{P}/hosts/edge-1", headers=admin)
            nmap = (await client.get(f"{P}/scanners/nmap", headers=admin)).json()
    assert (nmap["is_active"], nmap["max_concurrent"]) == (False, 3)
    assert forecast_says_kept is forecast["promise_kept"]
    assert deleted.status_code == 404
    assert job["enabled"] is False
    assert job["definition"]["recurrence"] == {"kind": "cron", "expression": "0 3 * * *"}
    assert job["definition"]["targets"]["filter"]["value"] == "prod"


async def test_console_lists_commands_filtered_and_shows_the_workers(
    settings: Settings, workers
) -> None:
    _chromium()  # Skip before starting anything when there is no browser.
    tokens = await prepare(settings)
    workers(settings)
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    await _seed_fleet(settings, admin)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos") as client:
            response = await client.post(
                J,
                params={"wait": "true"},
                json={
                    "name": "weekly-lab",
                    "scanner": "compliance",
                    "recurrence": {"kind": "cron", "expression": "0 3 * * 1"},
                },
                headers=admin,
            )
            assert response.status_code in (200, 202), response.text
            total = (await client.get(f"{P}/commands", headers=admin)).json()["count"]
    from selenium.webdriver.common.by import By

    with serving(settings) as base, chromium() as driver:
        sign_in(driver, base, tokens[Role.GUEST])
        # The fleet page renders first; a view still loading would overwrite the next one.
        shown(driver, "#fleet-cards")
        driver.get(f"{base}/#/commands")
        # The worker may issue more while the page loads: at least what the API counted.
        listed = shown(driver, "h1", lambda element: element.text.startswith("Commands ("))
        assert int(re.sub(r"\D", "", listed.text)) >= total >= 6, listed.text
        shown(driver, "table", lambda element: "succeeded" in element.text)

        # The filter form: edge-1's scan failed.
        form = shown(driver, "#command-filters")
        form.find_element(By.NAME, "host").send_keys("edge-1")
        form.find_element(By.CSS_SELECTOR, "select[name='state'] option[value='failed']").click()
        form.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        # The page re-renders from the URL, its form filled from the filters.
        shown(driver, "#command-filters input[name='host']", lambda e: e.get_attribute("value"))
        heading = shown(driver, "h1")
        assert re.fullmatch(r"Commands \([1-9]\d*\)", heading.text), heading.text
        assert "host=edge-1" in driver.current_url and "state=failed" in driver.current_url
        rows = driver.find_elements(By.CSS_SELECTOR, "main table tbody tr")
        assert rows and all("edge-1" in row.text and "failed" in row.text for row in rows)

        # A filter the API refuses: its 422 names the field, and the form stays.
        driver.get(f"{base}/#/commands?issued_from=yesterday")
        shown(driver, ".notice.error", lambda element: "issued_from" in element.text)
        assert shown(driver, "#command-filters")

        # The host page links into the list, filtered to that host.
        driver.get(f"{base}/#/hosts/mail-1")
        shown(driver, "a.commands-link", lambda element: "this host" in element.text).click()
        shown(driver, "h1", lambda element: element.text == "Commands (1)")
        assert "mail-1" in shown(driver, "main table tbody tr").text

        # So does the schedule page, filtered to that schedule (it has not run yet).
        driver.get(f"{base}/#/schedules/weekly-lab")
        shown(driver, "a.commands-link", lambda element: "this schedule" in element.text).click()
        shown(driver, "h1", lambda element: element.text == "Commands (0)")
        assert "schedule=weekly-lab" in driver.current_url

        # The workers page: one worker, owning the dispatch queue, nothing unassigned.
        driver.get(f"{base}/#/workers")
        cards = shown(driver, "#worker-cards", lambda element: "1\nworkers" in element.text)
        assert "0\nunassigned partitions" in cards.text
        assert shown(driver, ".dispatch-owner").text == "owner"
        partitions = shown(driver, "main table", lambda e: settings.topics.object_created in e.text)
        assert "unassigned" not in partitions.text
