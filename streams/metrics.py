"""The worker's Prometheus metrics and its HTTP endpoints (`/metrics`, `/healthz`).

Served on KAIROS_METRICS_HOST:KAIROS_METRICS_PORT when the port is set (0, the default, serves
nothing, so several workers can share a machine). Gauges are read at scrape time; counters and
the lateness histogram are recorded by the stages as they work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from aiohttp import web

from kairos.floor.prometheus import (
    CONTENT_TYPE,
    LATENESS_BUCKETS,
    Counter,
    Gauge,
    Histogram,
    Labels,
    Registry,
)

log = logging.getLogger(__name__)


class WorkerMetrics:
    """What a worker counts; `registry.render()` is the exposition."""

    def __init__(self) -> None:
        registry = self.registry = Registry()
        self.commands_issued = registry.add(
            Counter("kairos_commands_issued_total", "Commands issued, by reason.", ("reason",))
        )
        self.lateness = registry.add(
            Histogram(
                "kairos_dispatch_lateness_seconds",
                "Scheduler seconds from a command's due time to its issue (issued_at - due_at).",
                LATENESS_BUCKETS,
            )
        )
        self.results_applied = registry.add(
            Counter("kairos_results_applied_total", "Scan results applied to host schedules.")
        )
        self.held_busy = registry.add(
            Counter(
                "kairos_adaptive_claims_held_busy_total",
                "Due adaptive claims held back because a schedule's command of the same"
                " scanner was in flight on the host.",
            )
        )
        self.withdrawn = registry.add(
            Counter(
                "kairos_commands_withdrawn_total",
                "Claims withdrawn while they waited for a slot, by reason (maintenance, down,"
                " inactive, deleted).",
                ("reason",),
            )
        )
        self.timeouts = registry.add(
            Counter("kairos_commands_timed_out_total", "Commands whose deadline passed.")
        )
        self.dead_letters = registry.add(
            Counter("kairos_dead_letters_total", "Records sent to dead-letters.", ("source_topic",))
        )
        self.forwarded = registry.add(
            Counter(
                "kairos_records_forwarded_total",
                "Input records found on another partition than their key's (murmur2) and"
                " forwarded there, by topic (`streams.routing`).",
                ("topic",),
            )
        )
        self.recovery_seconds = registry.add(
            Gauge("kairos_recovery_duration_seconds", "Duration of the last table recovery.")
        )

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        self.registry.add(Gauge(name, help_text, read=lambda: {(): read()}))

    def labelled_gauge(
        self, name: str, help_text: str, labels: Labels, read: Callable[[], dict[Labels, float]]
    ) -> None:
        self.registry.add(Gauge(name, help_text, labels, read=read))

    def issued(self, *, reason: str, due_at: datetime, issued_at: datetime) -> None:
        self.commands_issued.inc(1, reason)
        self.lateness.observe(max(0.0, (issued_at - due_at).total_seconds()))


async def serve(
    registry: Registry, healthy: Callable[[], bool], *, host: str, port: int
) -> web.AppRunner:
    """Start the metrics and health endpoints; the caller keeps the runner to stop it."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=registry.render().encode(), headers={"Content-Type": CONTENT_TYPE})

    async def health(request: web.Request) -> web.Response:
        if healthy():
            return web.json_response({"status": "ok"})
        return web.json_response({"status": "unhealthy"}, status=503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("metrics on http://%s:%d/metrics", host, port)
    return runner


def consumer_lag(app: Any) -> dict[Labels, float]:
    """Records between each assigned input partition's last read offset and its end."""
    consumer = app.consumer
    lag: dict[Labels, float] = {}
    for tp in consumer.assignment():
        if tp.topic.endswith("-changelog"):
            continue
        highwater = consumer.highwater(tp)
        read = consumer._read_offset.get(tp)
        if highwater is None:
            continue
        next_offset = read + 1 if read is not None else 0
        lag[(tp.topic, str(tp.partition))] = max(0, highwater - next_offset)
    return lag
