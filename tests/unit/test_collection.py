"""The collector's pace for the worker and the projector (kairos.floor.collection)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from kairos.floor.collection import OLDER_THRESHOLDS, YOUNG_THRESHOLD, pace_for_streaming


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_pacing_freezes_what_exists_and_collects_the_young_less_often() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    built_at_start = [[] for _ in range(1000)]  # Lists: always tracked by the collector.
    pace_for_streaming()
    assert gc.get_freeze_count() >= len(built_at_start)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    assert YOUNG_THRESHOLD > 700  # CPython's default, which the pace is meant to exceed.
