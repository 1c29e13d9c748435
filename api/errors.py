"""Domain errors of the API and the one table that maps them to HTTP answers.

Every error leaves as `ErrorPublic` (`{"detail": ..., "errors": ...}`), validation errors
included. Driver errors are translated to `DatabaseUnavailable` / `KafkaUnavailable` where
they happen (`api/queries.py`, `api/deps.py`, `api/publisher.py`), never here.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from kairos.floor.db import DatabaseUnavailable
from schemas.api import ErrorPublic, FieldErrorPublic

log = logging.getLogger(__name__)


class KafkaUnavailable(ConnectionError):
    """Kafka could not be reached or did not acknowledge in time; the message names where."""


class Unauthenticated(PermissionError):
    """No bearer token, or one that is unknown or revoked."""


class Forbidden(PermissionError):
    """The caller's role is below what the operation needs."""


class HostNotFound(LookupError):
    pass


class HostExists(RuntimeError):
    """A host with this id is in the read model already."""


class CommandNotFound(LookupError):
    pass


class LeaseNotFound(LookupError):
    """A result for a command this gateway never leased (or has long forgotten)."""


class LeaseConflict(RuntimeError):
    """A result whose lease expired, was taken over, or was already reported."""


class GatewayBusy(RuntimeError):
    """The agent gateway serves as many scanners as it may."""


class InvalidInput(ValueError):
    """An input that passed type checks but makes no sense; names its field."""

    def __init__(self, field: str, message: str, *, location: str = "query") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.location = location


ERROR_STATUS: dict[type[Exception], int] = {
    Unauthenticated: 401,
    Forbidden: 403,
    HostNotFound: 404,
    CommandNotFound: 404,
    HostExists: 409,
    LeaseNotFound: 404,
    LeaseConflict: 409,
    GatewayBusy: 503,
    InvalidInput: 422,
    DatabaseUnavailable: 503,
    KafkaUnavailable: 503,
}
"""Domain error -> HTTP status. The first matching class in the error's MRO wins."""


def _status_of(error: Exception) -> int:
    for cls in type(error).__mro__:
        if cls in ERROR_STATUS:
            return ERROR_STATUS[cls]
    return 500


def error_response(
    status_code: int,
    detail: str,
    *,
    errors: list[FieldErrorPublic] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ErrorPublic(detail=detail, errors=errors)
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True), status_code=status_code, headers=headers
    )


async def _domain_error(request: Request, error: Exception) -> JSONResponse:
    status_code = _status_of(error)
    headers = {"WWW-Authenticate": "Bearer"} if status_code == 401 else None
    errors = None
    if isinstance(error, InvalidInput):
        errors = [
            FieldErrorPublic(
                field=error.field, location=error.location, message=error.message, type="invalid"
            )
        ]
    if status_code == 503:
        headers = {"Retry-After": "5"}
    return error_response(status_code, str(error), errors=errors, headers=headers)


def _field_error(raw: dict[str, Any]) -> FieldErrorPublic:
    location = [str(part) for part in raw.get("loc", ())]
    where = location[0] if location else "request"
    field = ".".join(location[1:]) or where
    return FieldErrorPublic(
        field=field,
        location=where,
        message=str(raw.get("msg", "invalid")),
        type=raw.get("type", ""),
    )


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    fields = [_field_error(raw) for raw in error.errors()]
    detail = "; ".join(f"{item.field}: {item.message}" for item in fields) or "invalid request"
    return error_response(422, detail, errors=fields)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 400:
        # FastAPI's "error parsing the body" (e.g. not UTF-8): invalid input like any other.
        field = FieldErrorPublic(
            field="body", location="body", message=str(error.detail), type="body_invalid"
        )
        return error_response(422, f"body: {error.detail}", errors=[field])
    headers = dict(error.headers or {})
    if error.status_code == 405:
        headers["Allow"] = ", ".join(_methods_allowed(request))
    return error_response(error.status_code, str(error.detail), headers=headers)


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _methods_allowed(request: Request) -> list[str]:
    """Every method some route fully matches at this path (Starlette names only the first
    route's, and GET /config and PUT /config are two routes)."""
    allowed = []
    for method in HTTP_METHODS:
        probe = {**request.scope, "method": method}
        if any(
            route.matches(probe)[0] is Match.FULL
            for route in request.app.routes
            if isinstance(route, BaseRoute)
        ):
            allowed.append(method)
    return allowed


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal error; the API log has the details")


def install(app: FastAPI) -> None:
    """Route every error through the table and the one shape."""
    for error_class in ERROR_STATUS:
        app.add_exception_handler(error_class, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorPublic, "description": description}


def error_answer(description: str) -> dict[str, Any]:
    """An OpenAPI answer in the one error shape, for a route's `responses`."""
    return _error(description)


READ_ERRORS: dict[int | str, dict[str, Any]] = {
    401: _error("No valid bearer token."),
    403: _error("The token's role is too low."),
    422: _error("Invalid input; `errors` names each field."),
    503: _error("PostgreSQL is unreachable."),
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **READ_ERRORS,
    503: _error("Kafka or PostgreSQL is unreachable; nothing was published."),
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _error("Not in the read model.")}
