"""A small synchronous client of the Kairos HTTP API, for the CLI.

Answers are returned as parsed JSON; an error answer raises `ApiError` carrying the status,
the API's `detail` and its per-field `errors`, which the CLI turns into one line and an exit
code (`exit_code_for`). Standard library only: the CLI must not need more than the API does.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNAVAILABLE = 2
EXIT_FORBIDDEN = 3
EXIT_NOT_FOUND = 4
EXIT_CONFLICT = 5
EXIT_INVALID = 6

_EXIT_BY_STATUS = {
    401: EXIT_FORBIDDEN,
    403: EXIT_FORBIDDEN,
    404: EXIT_NOT_FOUND,
    409: EXIT_CONFLICT,
    422: EXIT_INVALID,
    503: EXIT_UNAVAILABLE,
}


def exit_code_for(status: int) -> int:
    """The CLI's exit code for an HTTP error status (documented in the README)."""
    return _EXIT_BY_STATUS.get(status, EXIT_FAILED)


@dataclass
class ApiError(Exception):
    """The API answered an error, or could not be reached (`status` 0)."""

    status: int
    detail: str
    errors: list[dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        if self.status == 0:
            return self.detail
        text = f"{self.status}: {self.detail}"
        named = [item for item in self.errors if item.get("field")]
        if named and not all(str(item["field"]) in self.detail for item in named):
            text += " (" + "; ".join(f"{e['field']}: {e.get('message', '')}" for e in named) + ")"
        return text

    @property
    def exit_code(self) -> int:
        return EXIT_UNAVAILABLE if self.status == 0 else exit_code_for(self.status)


class ApiClient:
    def __init__(self, base_url: str, token: str | None, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("POST", path, body=body, query=query)

    def put(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("PUT", path, body=body, query=query)

    def patch(self, path: str, body: Any = None) -> Any:
        return self.request("PATCH", path, body=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def request(
        self, method: str, path: str, *, body: Any = None, query: dict[str, Any] | None = None
    ) -> Any:
        pairs: list[tuple[str, str]] = []
        for key, value in (query or {}).items():
            if value is None:
                continue
            for item in value if isinstance(value, list | tuple) else [value]:
                pairs.append((key, str(item).lower() if isinstance(item, bool) else str(item)))
        url = self.base_url + path + ("?" + urllib.parse.urlencode(pairs) if pairs else "")
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise _api_error(error.code, error.read()) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ApiError(
                0,
                f"the Kairos API is not reachable at {self.base_url} ({reason}); "
                "is `kairos dev` running here, or is KAIROS_API_URL right?",
            ) from None
        return json.loads(raw) if raw else None


def _api_error(status: int, raw: bytes) -> ApiError:
    try:
        body = json.loads(raw)
    except ValueError:
        return ApiError(status, raw.decode(errors="replace")[:300] or "error")
    if not isinstance(body, dict):
        return ApiError(status, str(body)[:300])
    return ApiError(status, str(body.get("detail", "error")), list(body.get("errors") or []))
