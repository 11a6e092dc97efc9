"""Span targets end to end: spans sent by a real OTLP client over loopback, a span-level
metric (tests/support/span_metric.py) scoring the model calls its `where` chooses; the
exported OTLP checked by span id: each result and its evaluation event on the span it
names, the roll-up on the root, nothing on the spans left out. The same in the collector
process and in a scoring worker (whose encoded bytes the collector sends as they are),
and when the trace comes back scored (a chained collector): replaced, not added to. The
exporters follow: log records, score metrics by span kind, the score router on the roll-up."""

from __future__ import annotations

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.pipeline.score_router import Condition
from tests.support.otlp_client import send
from tests.support.ports import free_port
from tests.support.running import scraped_samples, wait_until
from tests.support.span_metric import agent_run, scored_run
from tests.support.spans import evaluation_events, request_of


def config(sink, workers: int = 0, metric: str = "", logs: bool = False) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms, scoring_workers: {workers}}}
  span_metric: {{on: llm, where: {{span_names: [chat plan, chat answer]}}{metric}}}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, span_metric], exporters: [otlp]}}
""" + ("    logs: {exporters: [otlp]}\n" if logs else "")


def scored_spans(sink, collector, spans, count: int = 5, timeout_s: float = 10.0):
    """The spans exported once `count` arrived, by id (of a repeated id, the last)."""
    send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: len(sink.spans()) >= count, timeout_s=timeout_s)
    return {span.span_id: span for span in sink.spans()}


def span_ok(span) -> dict:
    return {key: value for key, value in attributes_to_dict(span.attributes).items() if key.startswith("eval.span_ok.")}


def assert_scored_on_their_spans(by_id, ids) -> None:
    plan, answer = span_ok(by_id[ids["plan"]]), span_ok(by_id[ids["answer"]])
    assert plan["eval.span_ok.score"] == 0.2 and plan["eval.span_ok.label"] == "fail"
    assert plan["eval.span_ok.explanation"] == "span chat plan"
    assert answer["eval.span_ok.score"] == 1.0 and answer["eval.span_ok.label"] == "pass"
    for name, score, label in (("plan", 0.2, "fail"), ("answer", 1.0, "pass")):
        [event] = evaluation_events(by_id[ids[name]])
        assert event["gen_ai.evaluation.name"] == "span_ok"
        assert (event["gen_ai.evaluation.score.value"], event["gen_ai.evaluation.score.label"]) == (score, label)
    root = span_ok(by_id[ids["root"]])
    assert (root["eval.span_ok.spans"], root["eval.span_ok.failing"]) == (2, 1)
    assert (root["eval.span_ok.min"], root["eval.span_ok.mean"]) == (0.2, pytest.approx(0.6))
    assert (root["eval.span_ok.score"], root["eval.span_ok.label"]) == (0.2, "fail")
    [rollup] = [e for e in evaluation_events(by_id[ids["root"]]) if e["gen_ai.evaluation.name"] == "span_ok"]
    assert rollup["gen_ai.evaluation.score.label"] == "fail"
    for left_out in ("tool", "summary"):
        assert not span_ok(by_id[ids[left_out]]) and not evaluation_events(by_id[ids[left_out]])


@pytest.mark.parametrize("workers", [0, 1])
def test_span_level_scores_are_on_the_scored_spans_and_rolled_up_on_the_root(sink, start_collector, workers):
    collector = start_collector(config(sink, workers))
    _, ids, spans = agent_run()
    by_id = scored_spans(sink, collector, spans, timeout_s=30 if workers else 10)
    assert_scored_on_their_spans(by_id, ids)


@pytest.mark.parametrize("workers", [0, 1])
def test_scored_again_the_spans_scored_now_replace_those_scored_before(sink, start_collector, workers):
    # A chained collector: the first scored plan and answer; the second scores only the
    # answer, so the plan's result goes and the root's roll-up is the answer's alone.
    first = start_collector(config(sink, workers))
    _, ids, spans = agent_run()
    scored = list(scored_spans(sink, first, spans, timeout_s=30 if workers else 10).values())
    second = start_collector(config(sink, workers).replace("chat plan, ", ""))
    by_id = scored_spans(sink, second, scored, count=10, timeout_s=30 if workers else 10)  # the later of each id
    assert not span_ok(by_id[ids["plan"]]) and not evaluation_events(by_id[ids["plan"]])
    assert [e["gen_ai.evaluation.score.value"] for e in evaluation_events(by_id[ids["answer"]])] == [1.0]
    root = span_ok(by_id[ids["root"]])
    assert (root["eval.span_ok.spans"], root["eval.span_ok.failing"], root["eval.span_ok.label"]) == (1, 0, "pass")
    assert len([e for e in evaluation_events(by_id[ids["root"]]) if e["gen_ai.evaluation.name"] == "span_ok"]) == 1


def test_a_result_naming_a_span_not_in_the_trace_is_an_error_on_the_root(sink, start_collector):
    collector = start_collector(config(sink, metric=", stray: true"))
    _, ids, spans = agent_run()
    by_id = scored_spans(sink, collector, spans)
    root = span_ok(by_id[ids["root"]])
    assert root["eval.span_ok.error"] == "1 of its 3 span-level results name spans not in the trace: 5742a45742a45742"
    assert span_ok(by_id[ids["answer"]])["eval.span_ok.score"] == 1.0


@pytest.mark.parametrize("workers", [0, 1])
def test_each_evaluation_log_record_carries_the_span_it_is_about(sink, start_collector, workers):
    collector = start_collector(config(sink, workers, logs=True))
    trace_id, ids, spans = agent_run()
    scored_spans(sink, collector, spans, timeout_s=30 if workers else 10)
    collector.stop()  # flushes the batched log records
    records = [r for r in sink.log_records() if r.trace_id == trace_id]
    by_span = {(r.span_id, attributes_to_dict(r.attributes)["gen_ai.evaluation.score.label"]) for r in records}
    assert by_span == {(ids["plan"], "fail"), (ids["answer"], "pass"), (ids["root"], "fail")}
    assert len(records) == 3


@pytest.mark.parametrize("workers", [0, 1])
def test_score_metrics_label_span_level_series_with_the_span_kind(sink, start_collector, workers):
    port = free_port()
    metrics = (
        f"  prometheus: {{endpoint: 127.0.0.1:{port}}}\n"
        "service:\n  pipelines:\n    metrics: {exporters: [prometheus], export_interval: 200ms}\n"
    )
    collector = start_collector(config(sink, workers).replace("service:\n  pipelines:\n", metrics))
    _, _, spans = agent_run()
    scored_spans(sink, collector, spans, timeout_s=30 if workers else 10)

    def results() -> dict[tuple[str | None, str], float]:
        return {
            (dict(labels).get("eval_span_kind"), dict(labels)["gen_ai_evaluation_score_label"]): value
            for (name, labels), value in scraped_samples(port).items()
            if name == "gen_ai_evaluation_results_total" and dict(labels)["gen_ai_evaluation_name"] == "span_ok"
        }

    assert wait_until(lambda: len(results()) == 3, timeout_s=10)
    # Each model call once, by its kind; the roll-up once, as a trace metric, without the
    # label (Prometheus shows an absent label as empty beside series that have it).
    assert results() == {("llm", "fail"): 1.0, ("llm", "pass"): 1.0, ("", "fail"): 1.0}


def test_the_score_router_reads_a_span_level_metric_by_its_roll_up_on_the_root():
    trace, _ = scored_run()  # span_ok: the plan call failed, the answer call passed
    assert [(r.name, r.label, r.span_id) for r in trace.results] == [("span_ok", "fail", None)]
    assert Condition(metric="span_ok", label="fail").holds(trace.results)
    assert not Condition(label="pass", every=True).holds(trace.results)
    assert Condition(metric="span_ok", score_below=0.5).holds(trace.results)
