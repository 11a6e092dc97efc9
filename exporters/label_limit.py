"""A cap on the distinct values each label takes on each score metric.

Labels such as `service.name`, `gen_ai.agent.name` or a copied `eval.case.id` come from
the traces, so their values are as many as clients choose to send, and each new value
starts new series in every exporter. The first `max_values` values a label takes on a
metric are kept; any later one is recorded as `other`, and counted, as a collector must
(every exporter sees the same capped labels, Prometheus and OTLP alike).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from spanscore.core.telemetry import Readout, TelemetryMetric

log = logging.getLogger("spanscore.metrics")

OTHER = "other"
DEFAULT_MAX_LABEL_VALUES = 200

FOLDED_LABEL_VALUES = TelemetryMetric(
    "spanscore_metrics_folded_label_values",
    "{recording}",
    "Score metric recordings with a label value past max_label_values, recorded as other, by metric and label",
    "counter",
)


class LabelValueLimit:
    """Thread-safe: scores are recorded from the event loop and read from exporter threads."""

    def __init__(self, max_values: int):
        self.max_values = max_values
        self._seen: dict[tuple[str, str], set[str | int | float | bool]] = {}
        self.folded: dict[tuple[str, str], int] = {}  # (metric, label) -> recordings folded into `other`
        self._lock = threading.Lock()

    def apply(
        self, metric: str, attributes: Mapping[str, str | int | float | bool], recordings: int = 1
    ) -> dict[str, str | int | float | bool]:
        """`attributes` with every value past its label's cap on `metric` replaced by
        `other`, for `recordings` recordings under them (counted when folded)."""
        capped = dict(attributes)
        with self._lock:
            for label, value in attributes.items():
                seen = self._seen.setdefault((metric, label), set())
                if value in seen:
                    continue
                if len(seen) < self.max_values:
                    seen.add(value)
                    continue
                key = (metric, label)
                if key not in self.folded:
                    self.folded[key] = 0
                    log.warning(
                        "metric %s has %d values of %s, its max_label_values; further ones are recorded as %r",
                        metric,
                        self.max_values,
                        label,
                        OTHER,
                    )
                self.folded[key] += recordings
                capped[label] = OTHER
        return capped

    def folded_counts(self) -> list[tuple[dict[str, str], float]]:
        """Recordings folded into `other` so far, one series per metric and label."""
        with self._lock:
            return [({"metric": metric, "label": label}, count) for (metric, label), count in self.folded.items()]

    def telemetry(self) -> list[Readout]:
        return [FOLDED_LABEL_VALUES.reads(self.folded_counts)]
