"""A worker's Prometheus sample read from its /metrics, as an operator's scrape would."""

from __future__ import annotations

import urllib.request

from kairos.floor.settings import Settings


def sample(settings: Settings, name: str, **labels: str) -> float | None:
    """The value of `name` with exactly `labels` on the worker serving `settings.metrics_port`;
    None when the worker does not expose that sample."""
    wanted = name
    if labels:
        wanted += "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}"
    url = f"http://127.0.0.1:{settings.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(wanted + " "):
                return float(line.split()[1])
    return None
