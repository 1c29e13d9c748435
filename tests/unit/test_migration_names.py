"""Every read-model migration has a number of its own, so their order is never a tie."""

from __future__ import annotations

from collections import Counter

from kairos.floor.db import RENAMED_MIGRATIONS, migrations


def test_no_two_migrations_share_a_number() -> None:
    numbers = Counter(name.split("_", 1)[0] for name, _ in migrations())
    assert [number for number, count in numbers.items() if count > 1] == []


def test_a_renamed_migration_exists_and_its_old_name_does_not() -> None:
    names = {name for name, _ in migrations()}
    assert set(RENAMED_MIGRATIONS) <= names
    assert not set(RENAMED_MIGRATIONS.values()) & names
