"""spanscore's own metrics: declared beside the counters they read, gathered from the
components that report them, joined, and listed in docs/metrics.md as declared."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import spanscore.collector.service  # noqa: F401  every module the service runs, so every declaration
from spanscore.collector.self_telemetry import self_telemetry
from spanscore.collector.service import Service
from spanscore.config.loader import parse_config
from spanscore.core.telemetry import Readout, TelemetryMetric, least, total
from spanscore.processors.judge_metrics.telemetry import worst_breaker_state
from spanscore.processors.openai_endpoint.breaker import BreakerState

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
HEADING = "## spanscore's own metrics"


def declared() -> dict[str, TelemetryMetric]:
    """Every `TelemetryMetric` module constant of the package's loaded modules, by name."""
    found: dict[str, TelemetryMetric] = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("spanscore."):
            for value in vars(module).values():
                if isinstance(value, TelemetryMetric):
                    assert found.setdefault(value.name, value) is value, f"{value.name} is declared twice"
    return found


def documented(text: str) -> dict[str, tuple[str, str, str]]:
    """The table under the page's own-metrics heading: name -> (kind, unit, description)."""
    rows: dict[str, tuple[str, str, str]] = {}
    section = text.split(f"\n{HEADING}\n", 1)[1].split("\n#", 1)[0]  # up to the next heading
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            name, kind, unit, description = cells
            rows[name.strip("`")] = (kind, unit.strip("`"), description)
    return rows


def differences(documented: dict[str, tuple[str, str, str]], declared: dict[str, TelemetryMetric]) -> list[str]:
    problems = [f"{name}: declared, not listed in docs/metrics.md" for name in sorted(declared.keys() - documented)]
    problems += [f"{name}: listed in docs/metrics.md, not declared" for name in sorted(documented.keys() - declared)]
    for name in sorted(declared.keys() & documented.keys()):
        metric = declared[name]
        if documented[name] != (metric.kind, metric.unit, metric.description):
            problems.append(
                f"{name}: docs/metrics.md lists {documented[name]}, "
                f"declared {(metric.kind, metric.unit, metric.description)}"
            )
    return problems


def test_the_docs_list_spanscores_own_metrics_as_they_are_declared():
    listed = documented(PAGE.read_text())
    assert "otelcol_receiver_accepted_spans" in listed and "spanscore_judge_requests" in listed
    assert differences(listed, declared()) == []


def test_a_metric_the_docs_and_the_declarations_disagree_on_is_named():
    text = PAGE.read_text()
    changed = (
        text.replace("| Spans accepted by the receivers |", "| Spans the receivers took |")
        .replace("| `spanscore_judge_held_calls` | gauge |", "| `spanscore_judge_held_calls` | counter |")
        .replace("`spanscore_write_ahead_size`", "`spanscore_write_ahead_bytes`")
    )
    assert changed.count("\n") == text.count("\n") and changed != text
    undocumented = TelemetryMetric("spanscore_new_thing", "{thing}", "Things", "counter")
    problems = differences(documented(changed), {**declared(), undocumented.name: undocumented})
    assert problems == [
        "spanscore_new_thing: declared, not listed in docs/metrics.md",
        "spanscore_write_ahead_size: declared, not listed in docs/metrics.md",
        "spanscore_write_ahead_bytes: listed in docs/metrics.md, not declared",
        "otelcol_receiver_accepted_spans: docs/metrics.md lists ('counter', '{span}', 'Spans the receivers took'), "
        "declared ('counter', '{span}', 'Spans accepted by the receivers')",
        "spanscore_judge_held_calls: docs/metrics.md lists ('counter', '{call}', "
        "'Judge calls held while the judge is unreachable'), declared ('gauge', '{call}', "
        "'Judge calls held while the judge is unreachable')",
    ]


def everything_on(tmp_path: Path, scoring_workers: int) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  memory_limiter: {{limit_mib: 4000}}
  assembler: {{scoring_workers: {scoring_workers}}}
  judge_metrics: {{judge: {{model: judge-test, base_url: 'http://127.0.0.1:1/v1', api_key: k}}}}
extensions:
  file_storage: {{directory: '{tmp_path}'}}
exporters:
  otlp: {{endpoint: 127.0.0.1:1, tls: {{insecure: true}}, sending_queue: {{storage: file_storage}}}}
  prometheus: {{endpoint: 127.0.0.1:0}}
service:
  extensions: [file_storage]
  pipelines:
    traces: {{receivers: [otlp], processors: [memory_limiter, assembler, judge_metrics], exporters: [otlp]}}
    metrics: {{exporters: [prometheus]}}
"""


def reported_by_service(config: str) -> dict[str, TelemetryMetric]:
    service = Service(parse_config(config, environ={}))  # built, not started
    assert service.score_metrics is not None
    reported = [readout.metric for readout in service.score_metrics.observed]
    assert len(reported) == len(set(reported)), "each metric once, its readings joined"
    return {metric.name: metric for metric in reported}


def test_services_running_every_component_that_reports_report_every_declared_metric(tmp_path):
    here = reported_by_service(everything_on(tmp_path, scoring_workers=0))
    in_workers = reported_by_service(everything_on(tmp_path, scoring_workers=1))
    assert in_workers == declared()
    assert here.keys() == {name for name in declared() if not name.startswith("spanscore_scoring_workers_")}


def test_without_their_components_their_metrics_are_not_reported(tmp_path):
    plain = everything_on(tmp_path, 0).replace("memory_limiter, assembler, judge_metrics", "assembler")
    plain = plain.replace("  extensions: [file_storage]\n", "").replace(", sending_queue: {storage: file_storage}", "")
    service = Service(parse_config(plain, environ={}))
    assert service.score_metrics is not None
    names = {readout.metric.name for readout in service.score_metrics.observed}
    assert "otelcol_exporter_sent_spans" in names and "spanscore_exporter_stored_spans" in names
    assert not {n for n in names if n.startswith(("spanscore_judge", "spanscore_write_ahead", "spanscore_memory"))}
    assert not {n for n in names if n.startswith("spanscore_scoring_workers")}


SENT = TelemetryMetric("sent", "{span}", "Spans sent", "counter")
STORED = TelemetryMetric("stored", "{span}", "Spans stored", "gauge")
LEFT = TelemetryMetric("left", "{request}", "Requests left", "gauge", join=least)


class Exporting:
    def __init__(self, name: str, sent: int, stored: int, left: int | None):
        self.name, self.sent, self.stored, self.left = name, sent, stored, left

    def telemetry(self) -> list[Readout]:
        return [
            SENT.reads(lambda: [({"exporter": self.name}, self.sent)]),
            STORED.reads(lambda: self.stored),
            LEFT.reads(lambda: self.left),
        ]


def test_a_metric_several_components_report_is_read_once_from_each_and_joined():
    a, b = Exporting("a", 3, 1, None), Exporting("b", 5, 2, 7)
    joined = {readout.metric: readout.read for readout in self_telemetry([a, object(), b])}
    assert list(joined) == [SENT, STORED, LEFT]
    assert joined[SENT]() == [({"exporter": "a"}, 3), ({"exporter": "b"}, 5)]
    assert joined[STORED]() == 3
    assert joined[LEFT]() == 7
    a.sent, a.stored, a.left = 4, 0, 6  # read when collected, not when gathered
    assert (joined[SENT]()[0][1], joined[STORED](), joined[LEFT]()) == (4, 2, 6)


def test_the_joins():
    assert total([1, None, 2.5]) == 3.5
    assert total([None, None]) is None
    assert total([[({"a": "1"}, 1.0)], [], [({"a": "2"}, 2.0)]]) == [({"a": "1"}, 1.0), ({"a": "2"}, 2.0)]
    with pytest.raises(TypeError):
        total([1, [({"a": "1"}, 1.0)]])
    assert least([None, 5, 3]) == 3 and least([None]) is None
    closed, open_, half_open = (int(s) for s in (BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN))
    assert worst_breaker_state([closed, half_open]) == half_open
    assert worst_breaker_state([half_open, open_, closed]) == open_
    assert worst_breaker_state([None]) == closed
