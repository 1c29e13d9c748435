"""The HTTP gateway for scanner agents that cannot reach Kafka (docs/agent.md): lease the
next command for a scanner, report its result. AGENT tokens only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response

from api.agent_gateway import AgentGateway
from api.deps import AgentDep, AuthenticatedRoute, RuntimeDep
from api.errors import READ_ERRORS, WRITE_ERRORS
from schemas.agent import CommandLeasePublic, ScanResultBody, scan_completed
from schemas.api import Accepted, ErrorPublic


def _error(description: str) -> dict[str, object]:
    return {"model": ErrorPublic, "description": description}


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    try:
        yield
    finally:
        gateway: AgentGateway | None = getattr(app.state, "agent_gateway", None)
        if gateway is not None:
            await gateway.close()


router = APIRouter(
    prefix="/api/agents", tags=["agents"], route_class=AuthenticatedRoute, lifespan=_lifespan
)

Scanner = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")]
CommandId = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[^\x00]*$")]


def _gateway(request: Request, runtime: RuntimeDep) -> AgentGateway:
    gateway: AgentGateway | None = getattr(request.app.state, "agent_gateway", None)
    if gateway is None:
        gateway = AgentGateway(runtime.settings, runtime.clock, timeout=runtime.timeout)
        request.app.state.agent_gateway = gateway
    return gateway


@router.post(
    "/{scanner}/commands:lease",
    response_model=CommandLeasePublic,
    responses={
        204: {"description": "No command for this scanner arrived within `wait` seconds."},
        **WRITE_ERRORS,
        503: _error("Kafka is unreachable, or this gateway serves too many scanners."),
    },
)
async def lease_command(
    scanner: Scanner,
    request: Request,
    runtime: RuntimeDep,
    caller: AgentDep,
    wait: Annotated[float, Query(ge=0, le=60, description="Long-poll up to this long.")] = 30,
    lease_seconds: Annotated[
        float, Query(ge=1, le=3600, description="The lease ends this long after it is given.")
    ] = 300,
) -> CommandLeasePublic | Response:
    """Lease the next command for `scanner`, waiting up to `wait` seconds for one (204 if none
    came). No other agent gets it until the lease ends; report it before then."""
    gateway = _gateway(request, runtime)
    leased = await gateway.lease(scanner, wait_seconds=wait, lease_seconds=lease_seconds)
    return leased if leased is not None else Response(status_code=204)


@router.post(
    "/commands/{command_id}/result",
    status_code=202,
    response_model=Accepted,
    responses={
        **READ_ERRORS,
        404: _error("This gateway never leased the command (or it was restarted since)."),
        409: _error("The lease expired, was taken by another agent, or was already reported."),
        503: _error("Kafka did not acknowledge the result; the lease holds, report again."),
    },
)
async def report_result(
    command_id: CommandId,
    body: ScanResultBody,
    request: Request,
    runtime: RuntimeDep,
    caller: AgentDep,
) -> Accepted:
    """Publish the result of a leased command on `scan-completed`, as the SDK would."""
    feed, command = _gateway(request, runtime).claim(command_id, body)
    result = scan_completed(command, body, now=runtime.clock.now())
    try:
        await runtime.publisher.publish_result(result)
    except BaseException:
        feed.unclaim(command_id)
        raise
    feed.reported(command_id)
    return Accepted(event_id=result.event_id)
