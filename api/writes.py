"""What every write shares: stamping the event, and `?wait=true` (watch the projection)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from api.deps import Caller, RuntimeDep
from api.errors import WRITE_ERRORS
from kairos.floor.clock import Clock
from kairos.floor.db import DatabaseUnavailable
from schemas.api import Accepted

POLL_SECONDS = 0.05
EVENT_ID_HEADER = "Kairos-Event-Id"

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Wait:
    """`?wait=true`, and how long this app waits for the projection (5 s unless told)."""

    enabled: bool
    seconds: float


def _wait(
    runtime: RuntimeDep,
    wait: Annotated[
        bool,
        Query(
            description="Wait up to 5 s until the read model shows the change, then answer "
            "200 with the new state; 202 as usual if it does not show in time."
        ),
    ] = False,
) -> Wait:
    return Wait(enabled=wait, seconds=runtime.wait_seconds)


WaitDep = Annotated[Wait, Depends(_wait)]


EVENT_ID_DOC = {
    EVENT_ID_HEADER: {
        "description": "Id of the published event.",
        "schema": {"type": "string", "format": "uuid"},
    }
}


def write_answers(state: type[BaseModel] | None = None) -> dict[int | str, dict[str, Any]]:
    """OpenAPI answers of a write: 202 receipt, 200 `state` with wait=true, and the errors."""
    answers: dict[int | str, dict[str, Any]] = {
        202: {"description": "Published; takes effect asynchronously.", "headers": EVENT_ID_DOC}
    }
    if state is not None:
        answers[200] = {
            "model": state,
            "description": "With wait=true: the projected state showing the change.",
            "headers": EVENT_ID_DOC,
        }
    return {**answers, **WRITE_ERRORS}


def stamp(caller: Caller, clock: Clock) -> dict[str, Any]:
    """The fields every ScheduleChange carries: a fresh event id, the time, the acting token."""
    return {"event_id": uuid.uuid4(), "occurred_at": clock.now(), "actor": caller.name[:255]}


def accepted(receipt: Accepted) -> JSONResponse:
    return JSONResponse(
        receipt.model_dump(mode="json"),
        status_code=202,
        headers={EVENT_ID_HEADER: str(receipt.event_id)},
    )


async def answer(
    receipt: Accepted,
    *,
    wait: Wait,
    read: Callable[[], Awaitable[T | None]],
    shows_change: Callable[[T], bool],
) -> JSONResponse:
    """202 + event id; with `wait`, 200 + the new state once `shows_change` holds (<= 5 s)."""
    if not wait.enabled:
        return accepted(receipt)
    deadline = time.monotonic() + wait.seconds
    while True:
        try:
            state = await read()
        except DatabaseUnavailable:
            # The change is published; a read-model blip must not turn that into a 503.
            return accepted(receipt)
        if state is not None and shows_change(state):
            return JSONResponse(
                state.model_dump(mode="json"),
                status_code=200,
                headers={EVENT_ID_HEADER: str(receipt.event_id)},
            )
        if time.monotonic() >= deadline:
            return accepted(receipt)
        await asyncio.sleep(POLL_SECONDS)
