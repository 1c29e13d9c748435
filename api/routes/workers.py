"""The workers: members of the worker group, what each is assigned, and how far behind."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.deps import AuthenticatedRoute, ClockDep, GuestDep, RuntimeDep
from api.errors import READ_ERRORS, error_answer
from api.routes import PREFIX
from api.worker_group import WorkerGroup
from schemas.api import WorkersPublic

router = APIRouter(prefix=PREFIX, tags=["operations"], route_class=AuthenticatedRoute)


def _worker_group(request: Request, runtime: RuntimeDep) -> WorkerGroup:
    group: WorkerGroup | None = getattr(request.app.state, "worker_group", None)
    if group is None:
        group = WorkerGroup(runtime.settings, timeout=runtime.timeout)
        request.app.state.worker_group = group
    return group


@router.get(
    "/workers",
    response_model=WorkersPublic,
    responses={**READ_ERRORS, 503: error_answer("Kafka is unreachable.")},
)
async def list_workers(
    request: Request, runtime: RuntimeDep, clock: ClockDep, caller: GuestDep
) -> WorkersPublic:
    """The worker group from Kafka's group coordinator: each member's client id, host,
    version (when its client id carries one) and assigned partitions with their lag; which
    member owns the single dispatch-queue partition; input partitions no one is assigned.
    Answers are cached for two seconds."""
    return await _worker_group(request, runtime).describe(now=clock.now())
