"""Scores leave as OTel metrics: Prometheus scrape endpoint and OTLP push."""

from __future__ import annotations

import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from spanscore.config.loader import ConfigError, parse_config
from spanscore.core.attributes import attributes_to_dict
from spanscore.core.provenance import CODE_PROVENANCE
from tests.support.otlp_client import send
from tests.support.otlp_sink import Fault
from tests.support.ports import free_port
from tests.support.running import wait_until
from tests.support.scored_suite import DATASET, attempt
from tests.support.spans import AGENT_ROOT, new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import TOY


def config(sink, metric_exporters: str, prometheus_port: int = 0) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
{TOY}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
  otlphttp: {{endpoint: http://127.0.0.1:{sink.http_port}}}
  prometheus: {{endpoint: 127.0.0.1:{prometheus_port}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, toy_metric], exporters: [otlp]}}
    metrics: {{exporters: {metric_exporters}, export_interval: 200ms}}
"""


def send_scored_traces(collector):
    for name, children in (("agent a", 3), ("agent b", 0)):  # toy scores 1.0 (pass) and 0.25 (fail)
        trace_id, root_id = new_trace_id(), new_span_id()
        spans = [span(trace_id, name, span_id=root_id, attributes={**AGENT_ROOT, "gen_ai.agent.name": "helper"})]
        spans += [span(trace_id, "step", parent=root_id) for _ in range(children)]
        send(collector.grpc_port, request_of(spans, service="shop-agent"))


def test_prometheus_endpoint_serves_score_histogram_and_result_counter(sink, start_collector):
    port = free_port()
    collector = start_collector(config(sink, "[prometheus]", port))
    send_scored_traces(collector)
    assert wait_until(lambda: len(sink.spans()) == 5)

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()

    assert wait_until(lambda: "gen_ai_evaluation_results_total" in scrape())
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scrape())
        for sample in family.samples
    }

    def value(name: str, label: str, **extra: str) -> float:
        labels = {
            "gen_ai_agent_name": "helper",
            "gen_ai_evaluation_name": "toy",
            "eval_evaluator": "code",
            "eval_revision": CODE_PROVENANCE.revision,
            "gen_ai_evaluation_score_label": label,
            "service_name": "shop-agent",
            **extra,
        }
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("gen_ai_evaluation_results_total", "pass") == 1.0
    assert value("gen_ai_evaluation_results_total", "fail") == 1.0
    assert value("gen_ai_evaluation_score_bucket", "fail", le="0.3") == 1.0  # 0.25 falls in (0.2, 0.3]
    assert value("gen_ai_evaluation_score_bucket", "fail", le="0.2") == 0.0
    assert value("gen_ai_evaluation_score_sum", "pass") == 1.0


@pytest.mark.parametrize("exporter", ["otlp", "otlphttp"])
def test_otlp_metrics_carry_scores_with_their_attributes(exporter, sink, start_collector):
    collector = start_collector(config(sink, f"[{exporter}]"))
    send_scored_traces(collector)
    assert wait_until(lambda: len(sink.metric_points("gen_ai.evaluation.results")) >= 2, timeout_s=10)
    collector.stop()  # the final flush exports the cumulative totals
    histogram = sink.metric_points("gen_ai.evaluation.score")
    by_label = {attributes_to_dict(p.attributes)["gen_ai.evaluation.score.label"]: p for p in histogram}
    assert by_label["fail"].sum == 0.25 and by_label["fail"].count == 1
    assert by_label["pass"].sum == 1.0 and list(by_label["pass"].explicit_bounds)[:3] == [0.1, 0.2, 0.3]
    attributes = attributes_to_dict(by_label["pass"].attributes)
    assert attributes == {
        "gen_ai.evaluation.name": "toy",
        "gen_ai.evaluation.score.label": "pass",
        "eval.evaluator": "code",
        "eval.revision": CODE_PROVENANCE.revision,
        "service.name": "shop-agent",
        "gen_ai.agent.name": "helper",
    }


def test_metric_pipeline_exporters_are_checked():
    sink_like = type("S", (), {"grpc_port": 1, "http_port": 2})()
    with pytest.raises(ConfigError) as error:
        parse_config(
            config(sink_like, "[prometheus]").replace("exporters: [otlp]}", "exporters: [prometheus]}"), environ={}
        )
    assert any("exports metrics only" in p for p in error.value.problems)
    with pytest.raises(ConfigError) as error:
        parse_config(
            config(sink_like, "[prometheus]").replace("metrics: {", "metrics: {receivers: [otlp], "), environ={}
        )
    assert any("takes no receivers" in p for p in error.value.problems)


def suite_config(sink, dataset, span_attributes: str) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
  ground_truth: {{dataset: {dataset}}}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, ground_truth], exporters: [otlp]}}
    metrics: {{exporters: [otlp], export_interval: 200ms{span_attributes}}}
"""


@pytest.mark.parametrize("per_case", [True, False])
def test_suite_success_counts_per_case_are_opt_in(per_case, sink, start_collector, tmp_path):
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET)
    collector = start_collector(suite_config(sink, dataset, ", span_attributes: [eval.case.id]" if per_case else ""))
    for case, city in (("oslo", "Oslo"), ("oslo", "Oslo"), ("oslo", "Bergen"), ("paris", "Paris")):
        send(collector.grpc_port, attempt(case, city))
    assert wait_until(lambda: len(sink.spans()) == 8)
    collector.stop()
    counts = {}
    for point in sink.metric_points("gen_ai.evaluation.results"):
        attributes = attributes_to_dict(point.attributes)
        if attributes["gen_ai.evaluation.name"] == "success":
            key = (attributes.get("eval.case.id"), attributes["gen_ai.evaluation.score.label"])
            counts[key] = max(counts.get(key, 0), point.as_int)  # cumulative: the last export's total
    if per_case:
        assert counts == {("oslo", "pass"): 2, ("oslo", "fail"): 1, ("paris", "pass"): 1}
    else:  # the suite's rolling TSR: one series per label
        assert counts == {(None, "pass"): 3, (None, "fail"): 1}


@pytest.mark.parametrize("key", ["service.name", "eval.success.score", "eval.case.id.label"])
def test_only_processor_attributes_can_label_the_score_metrics(key, tmp_path):
    sink_like = type("S", (), {"grpc_port": 1, "http_port": 2})()
    with pytest.raises(ConfigError) as error:
        parse_config(suite_config(sink_like, tmp_path / "suite.yaml", f", span_attributes: [{key}]"), environ={})
    assert any("not an attribute a processor writes" in p for p in error.value.problems)


def prometheus_samples(port: int) -> dict[str, float]:
    """Every sample the Prometheus endpoint on `port` serves now, by name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples}


def test_spanscore_reports_its_own_throughput_refusals_and_queue_depth(sink, start_collector):
    port = free_port()
    collector = start_collector(config(sink, "[prometheus]", port))
    send_scored_traces(collector)
    assert wait_until(lambda: len(sink.spans()) == 5)

    assert wait_until(lambda: prometheus_samples(port).get("spanscore_pipeline_exported_traces_total") == 2.0)
    found = prometheus_samples(port)
    assert found["otelcol_receiver_accepted_spans_total"] == 5.0
    assert found["spanscore_receiver_rejected_spans_total"] == 0.0
    assert found["spanscore_receiver_refused_requests_total"] == 0.0
    assert found["otelcol_exporter_send_failed_spans_total"] == 0.0
    assert found["spanscore_pipeline_held_spans"] == 0.0
    assert found["spanscore_pipeline_held_spans_limit"] == collector.pipeline.counts.max_held_spans


def test_write_ahead_log_and_scoring_workers_report_their_figures(sink, start_collector, tmp_path):
    port = free_port()
    durable = (
        config(sink, "[prometheus]", port)
        .replace("assembler: {trace_wait: 20ms}", "assembler: {trace_wait: 20ms, scoring_workers: 1}")
        .replace(
            "service:\n",
            f"extensions: {{file_storage: {{directory: '{tmp_path / 'wal'}'}}}}\n"
            "service:\n  extensions: [file_storage]\n",
        )
    )
    assert "scoring_workers" in durable and "file_storage" in durable
    collector = start_collector(durable)
    send_scored_traces(collector)  # two requests, five spans
    assert wait_until(lambda: len(sink.spans()) == 5, timeout_s=20)

    assert wait_until(lambda: prometheus_samples(port).get("spanscore_write_ahead_pending_requests") == 0.0)
    found = prometheus_samples(port)
    assert found["spanscore_write_ahead_requests_total"] == 2.0
    assert found["spanscore_write_ahead_replayed_spans_total"] == 0.0
    assert 0 < found["spanscore_write_ahead_size_bytes"] < found["spanscore_write_ahead_size_limit_bytes"] == 1 << 30
    assert found["spanscore_scoring_workers_in_flight"] == 0.0
    assert found["spanscore_scoring_workers_restarts_total"] == 0.0
    # Scored in the worker, attached here: the toy scores are on the spans.
    assert sorted(
        attributes_to_dict(s.attributes).get("eval.toy.score") for s in sink.spans() if s.name.startswith("agent")
    ) == [0.25, 1.0]


def test_exporter_sends_and_drops_are_reported_by_exporter_and_reason(sink, start_collector):
    port = free_port()
    sink.faults.append(Fault(grpc_code=grpc.StatusCode.INVALID_ARGUMENT))  # the first send is refused for good
    collector = start_collector(config(sink, "[prometheus]", port))
    send_scored_traces(collector)
    [exporter] = collector.pipeline.exporters
    assert wait_until(lambda: exporter.sent_spans + exporter.dropped_spans == 5)
    assert exporter.dropped_spans > 0

    def series(name: str) -> dict[tuple, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return {
            tuple(sorted((k, v) for k, v in s.labels.items() if k in ("exporter", "reason"))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
        }

    assert wait_until(
        lambda: series("otelcol_exporter_sent_spans_total").get((("exporter", "otlp"),)) == exporter.sent_spans
    )
    assert series("otelcol_exporter_send_failed_spans_total") == {
        (("exporter", "otlp"), ("reason", "refused")): exporter.dropped_spans,
        (("exporter", "otlp"), ("reason", "retries_exhausted")): 0.0,
        (("exporter", "otlp"), ("reason", "shutdown")): 0.0,
    }


def test_label_values_past_max_label_values_fold_into_other_in_every_exporter(sink, start_collector):
    port = free_port()
    collector = start_collector(
        config(sink, "[prometheus, otlp]", port).replace(
            "export_interval: 200ms", "export_interval: 200ms, max_label_values: 5"
        )
    )
    for i in range(20):
        trace_id = new_trace_id()
        send(collector.grpc_port, request_of([span(trace_id, "agent", attributes=AGENT_ROOT)], service=f"agent-{i}"))
    assert wait_until(lambda: len(sink.spans()) == 20)

    def scrape() -> dict[tuple[str, str], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return {
            (sample.name, sample.labels.get("service_name", sample.labels.get("metric", ""))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name in ("gen_ai_evaluation_results_total", "spanscore_metrics_folded_label_values_total")
        }

    assert wait_until(lambda: sum(v for (n, _), v in scrape().items() if n.startswith("gen_ai")) == 20)
    samples = scrape()
    results = {service: value for (name, service), value in samples.items() if name.startswith("gen_ai")}
    assert len(results) == 6 and results["other"] == 15  # five names kept, the other fifteen folded
    assert samples[("spanscore_metrics_folded_label_values_total", "gen_ai.evaluation.results")] == 15
    collector.stop()  # the final flush exports the cumulative totals
    pushed = {
        attributes_to_dict(p.attributes)["service.name"]: p.as_int
        for p in sink.metric_points("gen_ai.evaluation.results")
    }
    assert pushed == results
