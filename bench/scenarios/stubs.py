"""Scenario 9 depends on features still landing; it measures nothing yet.

It exists so the numbering is stable and `python -m bench cron` says plainly that
there is no figure, instead of printing a made-up one. It is excluded from `all`.
"""

from __future__ import annotations

PENDING = {
    "cron": (9, "Cron/RRULE schedules at scale",
             "needs cron/RRULE schedules in the worker to land"),
}  # fmt: skip


def not_yet_built(key: str) -> str:
    number, title, reason = PENDING[key]
    return f"{number}. {title}: not yet built ({reason}); no figure is reported."
