"""Scenarios 5, 6 and 9 depend on features still landing; they measure nothing yet.

They exist so the numbering is stable and `python -m bench projection` says plainly that
there is no figure, instead of printing a made-up one. They are excluded from `all`.
"""

from __future__ import annotations

PENDING = {
    "projection": (5, "Projection lag (host-state → PostgreSQL read model)",
                   "the projector has only just landed in streams/projection; "
                   "the lag scenario is not written"),
    "api": (6, "API latency under load",
            "needs the API routes still being written in api/routes"),
    "cron": (9, "Cron/RRULE schedules at scale",
             "needs cron/RRULE schedules in the worker to land"),
}  # fmt: skip


def not_yet_built(key: str) -> str:
    number, title, reason = PENDING[key]
    return f"{number}. {title}: not yet built ({reason}); no figure is reported."
