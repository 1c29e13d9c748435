"""`kairos audit` and `kairos dead-letters redrive` through a real API, PostgreSQL and broker."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kairos.floor.db import connect
from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import prepare
from tests.integration.test_console import serving
from tests.support.factories import host_created
from tests.support.stack import kairos_executable, settings_env

pytestmark = pytest.mark.integration


async def test_kairos_audit_filters_and_redrive_refuses_then_sends_then_guards(
    settings: Settings, tmp_path: Path
) -> None:
    tokens = await prepare(settings)
    letter_id = uuid.uuid4()
    fixed = json.loads(host_created("cli-1").model_dump_json())
    broken = {key: value for key, value in fixed.items() if key != "occurred_at"}
    async with await connect(settings.database_url) as conn:
        await conn.execute(
            'INSERT INTO dead_letters (event_id, source_topic, partition, "offset", key, error,'
            " raw, received_at) VALUES (%s, %s, 0, 7, 'cli-1', 'occurred_at: missing', %s, %s)",
            (letter_id, settings.topics.object_created, json.dumps(broken), datetime.now(UTC)),
        )
        await conn.commit()
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    (tmp_path / "fixed.json").write_text(json.dumps(fixed))

    with serving(settings) as url:
        env = {
            **settings_env(settings),
            "KAIROS_API_URL": url,
            "KAIROS_TOKEN": tokens[Role.SECURITY_ADMIN],
        }

        def kairos(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*kairos_executable(), *args], env=env, capture_output=True, text=True, timeout=60
            )

        made = kairos("audit", "--type", "token.created", "--json")
        assert made.returncode == 0, made.stderr
        names = {entry["subject_id"] for entry in json.loads(made.stdout)["data"]}
        assert names == {f"tester-{role.name.lower()}" for role in Role}
        nobody = kairos("audit", "--actor", "nobody")
        assert nobody.returncode == 0 and "0 of 0 change(s)" in nobody.stdout

        redrive = ["dead-letters", "redrive", str(letter_id)]
        refused = kairos(*redrive, "--body", str(tmp_path / "broken.json"))
        assert refused.returncode != 0 and "422" in refused.stderr
        assert "body.occurred_at" in refused.stderr
        sent = kairos(*redrive, "--body", str(tmp_path / "fixed.json"))
        assert sent.returncode == 0, sent.stderr
        assert f"redriven to {settings.topics.object_created}" in sent.stdout
        assert fixed["event_id"] in sent.stdout
        again = kairos(*redrive, "--body", str(tmp_path / "fixed.json"))
        assert again.returncode != 0 and "409" in again.stderr and "force" in again.stderr
        forced = kairos(*redrive, "--body", str(tmp_path / "fixed.json"), "--force")
        assert forced.returncode == 0, forced.stderr

        listed = kairos("audit", "--type", "dead_letter.redriven", "--subject", str(letter_id))
        assert listed.returncode == 0, listed.stderr
        assert "2 of 2 change(s)" in listed.stdout and "tester-security_admin" in listed.stdout
        since = kairos("audit", "--since", "2999-01-01T00:00:00Z")
        assert since.returncode == 0 and "0 of 0 change(s)" in since.stdout
