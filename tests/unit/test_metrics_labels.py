"""/metrics labels stay bounded whatever clients send."""

from __future__ import annotations

from types import SimpleNamespace

from api.metrics import OTHER_METHOD, UNMATCHED, RequestMetrics, method_label, route_label


def test_unknown_methods_collapse_to_one_label() -> None:
    assert [method_label(m) for m in ("GET", "DELETE", "OPTIONS")] == ["GET", "DELETE", "OPTIONS"]
    assert {method_label(m) for m in ("FOO", "PROPFIND", "get", "X" * 500)} == {OTHER_METHOD}


def test_route_label_is_the_template_or_unmatched() -> None:
    template = "/api/compliance/scheduler/hosts/{host_id}"
    assert route_label({"route": SimpleNamespace(path=template), "path": "/x/h-1"}) == template
    assert route_label({"path": "/no/such/path"}) == UNMATCHED


def test_many_raw_paths_and_methods_make_few_series() -> None:
    metrics = RequestMetrics()
    for number in range(200):
        metrics.observe(method_label(f"M{number}"), route_label({"path": f"/{number}"}), 404, 0.01)
    assert list(metrics.requests) == [(OTHER_METHOD, UNMATCHED, "404")]
