"""Each label takes at most `max_values` values per metric; later ones become `other`,
counted per metric and label, with one warning when a label first reaches its cap."""

from __future__ import annotations

import logging

from spanscore.exporters.label_limit import OTHER, LabelValueLimit


def test_values_past_the_cap_fold_into_other_per_metric_and_label(caplog):
    caplog.set_level(logging.WARNING, logger="spanscore.metrics")
    limit = LabelValueLimit(3)
    recorded = [limit.apply("results", {"service.name": f"svc-{i}", "label": "pass"}) for i in range(6)]
    assert [r["service.name"] for r in recorded] == ["svc-0", "svc-1", "svc-2", OTHER, OTHER, OTHER]
    assert all(r["label"] == "pass" for r in recorded)
    assert limit.apply("results", {"service.name": "svc-1"}) == {"service.name": "svc-1"}  # kept values stay
    assert limit.apply("scores", {"service.name": "svc-5"}) == {"service.name": "svc-5"}  # another metric
    assert limit.folded_counts() == [({"metric": "results", "label": "service.name"}, 3)]
    assert [r.getMessage() for r in caplog.records] == [
        "metric results has 3 values of service.name, its max_label_values; further ones are recorded as 'other'"
    ]
