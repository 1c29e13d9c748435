"""Prometheus text exposition, without a client library: request counts and latency per
route template, plus gauges read at scrape time (pool statistics, projection lag)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from kairos.floor.prometheus import number, render_labels

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNMATCHED = "unmatched"
"""Route label of requests no route matched, so scanners cannot blow up label cardinality."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "OTHER"
"""Method label of every method not in METHODS (`FOO`, `PROPFIND`, ...), for the same reason."""


class RequestMetrics:
    """Counters and a latency histogram keyed by (method, route template, status)."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        self.buckets: defaultdict[tuple[str, str], list[int]] = defaultdict(
            lambda: [0] * len(BUCKETS)
        )
        self.sums: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.counts: defaultdict[tuple[str, str], int] = defaultdict(int)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests[(method, route, str(status))] += 1
        key = (method, route)
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.buckets[key][index] += 1
        self.sums[key] += seconds
        self.counts[key] += 1

    def lines(self) -> list[str]:
        out = [
            "# HELP kairos_api_requests_total Requests answered, by method, route and status.",
            "# TYPE kairos_api_requests_total counter",
        ]
        for (method, route, status), value in sorted(self.requests.items()):
            labels = render_labels([("method", method), ("route", route), ("status", status)])
            out.append(f"kairos_api_requests_total{labels} {value}")
        out += [
            "# HELP kairos_api_request_duration_seconds Time to answer, by method and route.",
            "# TYPE kairos_api_request_duration_seconds histogram",
        ]
        for (method, route), counts in sorted(self.buckets.items()):
            base = [("method", method), ("route", route)]
            for bound, value in zip(BUCKETS, counts, strict=True):
                labels = render_labels([*base, ("le", number(bound))])
                out.append(f"kairos_api_request_duration_seconds_bucket{labels} {value}")
            total = self.counts[(method, route)]
            inf = render_labels([*base, ("le", "+Inf")])
            out.append(f"kairos_api_request_duration_seconds_bucket{inf} {total}")
            out.append(
                f"kairos_api_request_duration_seconds_sum{render_labels(base)} "
                f"{number(self.sums[(method, route)])}"
            )
            out.append(f"kairos_api_request_duration_seconds_count{render_labels(base)} {total}")
        return out


def gauge(name: str, help_text: str, value: float | None) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    if value is not None:
        lines.append(f"{name} {number(value)}")
    return lines


def method_label(method: str) -> str:
    return method if method in METHODS else OTHER_METHOD


def route_label(scope: Scope) -> str:
    """The template of the route that answered (`/hosts/{host_id}`), never the raw path."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


class MetricsMiddleware:
    """Times every HTTP request and records it under its route template."""

    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_recording_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_recording_status)
        finally:
            self.metrics.observe(
                method_label(scope["method"]),
                route_label(scope),
                status,
                time.perf_counter() - started,
            )
