"""The request body limit: a body longer than `KAIROS_API_MAX_BODY_BYTES` is answered 413.

The limit is enforced where the body is read, so it holds for chunked bodies without a
`Content-Length` as well, and nothing is read before the route has authenticated the caller:
an unauthenticated request gets its 401 without its body being read at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestBodyTooLarge(HTTPException):
    """The body is longer than the limit. An HTTPException, so that FastAPI's body reading
    passes it on as it is instead of calling it a parse error."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            status_code=413,
            detail=f"the request body is larger than the API accepts ({limit} bytes)",
        )


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimitMiddleware:
    """Counts the body bytes as the app reads them; past `max_bytes` the read raises
    RequestBodyTooLarge (a declared `Content-Length` over the limit raises at the first
    read, before any byte is taken)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            if declared is not None and declared > self.max_bytes:
                raise RequestBodyTooLarge(self.max_bytes)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise RequestBodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited_receive, send)
