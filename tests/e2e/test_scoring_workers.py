"""`scoring_workers`: the processors in worker processes score exactly as in the collector.

The same seeded agent traffic (12 sessions x 3 turns, the second turn repeating the
first's answer so loop detection depends on the order of a session's turns) goes to a
`spanscore run` scoring in its own process and to one scoring in two worker processes;
every trace's and every session's scores must match. A worker killed while it holds
traces costs those traces their scores, never the traces, and is started again.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from bench.ingest import child_pids
from spanscore.collector.service import Service
from spanscore.config.loader import parse_config
from spanscore.core.attributes import attributes_to_dict
from spanscore.core.otlp_json import encode_request
from spanscore.pipeline.settings import PipelineSettings
from tests.support.failing_run import run_spans
from tests.support.otlp_client import send
from tests.support.otlp_sink import OtlpSink
from tests.support.ports import free_port
from tests.support.replicas import CONFIG, Replica, scores, send_sessions
from tests.support.running import scraped_samples, sink_config, wait_until
from tests.support.spans import (
    AGENT_ROOT,
    assert_rescored,
    evaluation_events,
    exported_span,
    new_span_id,
    new_trace_id,
    request_of,
    scored_before,
    span,
)
from tests.support.toy_metric import TOY

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = [f"session-{n}" for n in range(12)]


class WorkersReplica(Replica):
    """`spanscore run` with the scale-out test's config, the static embedder and `scoring_workers: N`."""

    def __init__(self, tmp_path: Path, name: str, workers: int):
        self.grpc, self.health = free_port(), free_port()
        self.output = tmp_path / f"{name}.jsonl"
        config = tmp_path / f"{name}.yaml"
        config.write_text(
            CONFIG.format(grpc=self.grpc, health=self.health, output=self.output)
            .replace("session_idle: 5m", f"session_idle: 5m, scoring_workers: {workers}")
            .replace("hashing", "static")
        )
        self.start(config)


def test_two_worker_processes_score_as_the_collector_process_does(tmp_path):
    single, workers = WorkersReplica(tmp_path, "single", 0), WorkersReplica(tmp_path, "workers", 2)
    try:
        assert wait_until(lambda: single.healthy() and workers.healthy(), timeout_s=60), "spanscore did not come up"
        assert len(child_pids(workers.process.pid)) == 2  # the scoring workers, not the resource tracker
        send_sessions(SESSIONS, single.grpc)
        send_sessions(SESSIONS, workers.grpc)
    finally:
        stderr = [r.stop() for r in (single, workers) if r.process.poll() is None]
    by_trace, by_session = scores([workers.output])
    expected_traces, expected_sessions = scores([single.output])
    assert len(expected_traces) == 36 and len(expected_sessions) == 12
    assert by_trace == expected_traces
    assert by_session == expected_sessions
    # The order-dependent result came out the same: each session's repeated turn is a loop.
    assert sum(found["eval.loop_detection.label"] == "fail" for found in by_trace.values()) == 12
    assert all("Traceback" not in text for text in stderr), stderr


FULL_CONFIG = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{grpc}'}}}}}}}}
processors:
  assembler: {{trace_wait: 100ms, session_idle: 2s, scoring_workers: {workers}}}
  embedding_metrics: {{embedder: {{type: static}}}}
  failure_localization: {{}}
  session_metrics: {{}}
exporters:
  {exporter}
  prometheus: {{endpoint: '127.0.0.1:{prometheus}'}}
extensions: {{health_check: {{endpoint: '127.0.0.1:{health}'}}}}
service:
  extensions: [health_check]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [assembler, embedding_metrics, failure_localization, session_metrics]
      exporters: [{exporter_id}]
    metrics: {{exporters: [prometheus]}}
"""


class FullReplica(Replica):
    """`spanscore run` with trace, finding and session metrics and score metrics on Prometheus."""

    def __init__(self, tmp_path: Path, name: str, workers: int, sink: OtlpSink | None = None):
        """Exporting to a file, or over OTLP to `sink` (with workers: each scored trace
        comes back encoded with its scores and is sent as those bytes)."""
        self.grpc, self.health, self.prometheus = free_port(), free_port(), free_port()
        self.output = tmp_path / f"{name}.jsonl"
        self.sink = sink
        if sink is None:
            exporter_id, exporter = "file", f"file: {{path: '{self.output}'}}"
        else:
            exporter_id, exporter = "otlp", f"otlp: {{endpoint: '127.0.0.1:{sink.grpc_port}', tls: {{insecure: true}}}}"
        config = tmp_path / f"{name}.yaml"
        config.write_text(
            FULL_CONFIG.format(
                grpc=self.grpc,
                health=self.health,
                prometheus=self.prometheus,
                workers=workers,
                exporter=exporter,
                exporter_id=exporter_id,
            )
        )
        self.start(config)

    def written(self) -> list[str]:
        """What it exported, as OTLP/JSON lines (the sink's spans as one request)."""
        if self.sink is not None:
            return [encode_request(request_of(self.sink.spans()))]
        return self.output.read_text().splitlines() if self.output.exists() else []

    def score_series(self) -> dict:
        """Every sample of spanscore's score metrics (gen_ai_evaluation_*) by name and labels."""
        return {
            key: value
            for key, value in scraped_samples(self.prometheus).items()
            if key[0].startswith("gen_ai_evaluation_") and not key[0].endswith("_created")
        }


def written_spans(lines: list[str]) -> dict:
    """What spanscore wrote on every span: its eval.* attributes and its evaluation events
    (their times left out), by trace and span id; a carrier by its session id, with its links."""
    spans = {}
    for line in lines:
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for one in scope_spans["spans"]:
                    attributes = {a["key"]: a["value"] for a in one.get("attributes", [])}
                    written = {
                        "attributes": {k: v for k, v in attributes.items() if k.startswith("eval.")},
                        "events": sorted(
                            json.dumps([e["name"], e.get("attributes", [])], sort_keys=True)
                            for e in one.get("events", [])
                        ),
                    }
                    if one["name"] == "evaluate_session":
                        written["links"] = sorted((link["traceId"], link["spanId"]) for link in one.get("links", []))
                        spans[attributes["session.id"]["stringValue"]] = written
                    else:
                        spans[(one["traceId"], one["spanId"])] = written
    return spans


@pytest.mark.parametrize("exporter", ["file", "otlp"])
def test_what_workers_prepare_is_what_the_collector_process_writes(exporter, sink, tmp_path):
    """Scores, findings, carriers and score metrics, encoded in the workers and merged by
    the collector (file) or sent as the workers encoded the traces (otlp), come out as the
    collector process writes them itself."""
    single = FullReplica(tmp_path, "single", 0)
    workers = FullReplica(tmp_path, "workers", 2, sink if exporter == "otlp" else None)
    failed_runs = [run_spans(failing=True) for _ in range(3)]  # failure_localization blames a span of each
    try:
        assert wait_until(lambda: single.healthy() and workers.healthy(), timeout_s=60), "spanscore did not come up"
        for replica in (single, workers):
            send_sessions(SESSIONS, replica.grpc)
            for _, _, spans in failed_runs:
                send(replica.grpc, request_of(spans))

        def all_written(replica) -> bool:  # every trace, and every session's carrier
            text = "".join(replica.written())
            return text.count("evaluate_session") == len(SESSIONS) and text.count("failure_localization") >= 3

        assert wait_until(lambda: all_written(single) and all_written(workers), timeout_s=60)
        time.sleep(0.5)  # the last carriers' score metrics are recorded after they are handed over
        expected_series, series = single.score_series(), workers.score_series()
    finally:
        stderr = [r.stop() for r in (single, workers) if r.process.poll() is None]
    expected, written = written_spans(single.written()), written_spans(workers.written())
    assert len(expected) == len(written) == 36 * 2 + 3 * 5 + len(SESSIONS)
    assert written == expected
    blamed = [
        key
        for key, one in written.items()
        if isinstance(key, tuple) and key[1] != "" and any("failure_localization" in event for event in one["events"])
    ]
    assert len(blamed) >= 3 + 3  # each failed run: its root's result and the blamed span's finding
    # Sums of scores added in another order may differ in the last bits.
    assert series.keys() == expected_series.keys()
    assert series == {key: pytest.approx(value, rel=1e-12) for key, value in expected_series.items()}
    assert (
        series[
            (
                "gen_ai_evaluation_failures_total",
                (
                    ("eval_failure_category", "rate_limiting"),
                    ("eval_failure_group", "system_execution"),
                    ("gen_ai_agent_name", "support-bot"),
                    ("service_name", "agent"),
                ),
            )
        ]
        == 3
    )
    assert all("Traceback" not in text for text in stderr), stderr


def test_a_killed_worker_costs_its_traces_their_scores_not_the_traces(sink, start_collector):
    toy = TOY.replace("toy_metric: {", "toy_metric: {delay_s: 3, ")
    assert toy != TOY
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, toy_metric]",
            extra_processors=toy,
            assembler="trace_wait: 50ms, scoring_workers: 1",
        )
    )
    [worker_pid] = collector.service.workers.pids
    held = []
    for i in range(3):
        trace_id, root_id = new_trace_id(), new_span_id()
        held.append(trace_id)
        send(collector.grpc_port, request_of([span(trace_id, f"turn {i}", span_id=root_id, attributes=AGENT_ROOT)]))
    assert wait_until(lambda: collector.service.workers.in_flight == 3, timeout_s=5)
    os.kill(worker_pid, signal.SIGKILL)
    assert wait_until(lambda: {s.trace_id for s in sink.spans()} >= set(held), timeout_s=10)
    for trace_id in held:
        [root] = [s for s in sink.spans() if s.trace_id == trace_id]
        attributes = attributes_to_dict(root.attributes)
        assert "eval.toy.score" not in attributes
        assert attributes["eval.toy.error"].startswith("scoring worker process exited (code -9)")
    # The worker was started again and scores what comes next.
    assert wait_until(lambda: collector.service.workers.pids != [worker_pid], timeout_s=5)
    trace_id = new_trace_id()
    send(collector.grpc_port, request_of([span(trace_id, "after", attributes=AGENT_ROOT)]))
    assert wait_until(lambda: any(s.trace_id == trace_id for s in sink.spans()), timeout_s=30)
    [root] = [s for s in sink.spans() if s.trace_id == trace_id]
    assert attributes_to_dict(root.attributes)["eval.toy.score"] == 0.25
    assert collector.service.workers.restarts == 1


def test_traces_and_sessions_a_worker_holds_at_the_stop_leave_with_their_metrics_skipped(sink, start_collector):
    toy = TOY.replace("toy_metric: {", "toy_metric: {delay_s: 60, ")
    config = sink_config(
        sink,
        processors="[assembler, toy_metric]",
        extra_processors=toy,
        assembler="trace_wait: 50ms, scoring_workers: 1",
    ).replace("shutdown_timeout: 10s", "shutdown_timeout: 3s\n  shutdown_export_reserve: 1s")
    collector = start_collector(config)
    held = []
    for i in range(2):
        trace_id = new_trace_id()
        held.append(trace_id)
        turn = {**AGENT_ROOT, "session.id": "chat-4"}
        send(collector.grpc_port, request_of([span(trace_id, f"turn {i}", attributes=turn)]))
    assert wait_until(lambda: collector.service.workers.in_flight == 1, timeout_s=5)  # the second waits its turn
    started = time.monotonic()
    collector.stop()
    assert time.monotonic() - started < 3 + 1
    why = (
        "spanscore stopped before scoring it: scoring gets 2s of shutdown_timeout, "
        "export the last 1s (shutdown_export_reserve)"
    )
    for trace_id in held:
        [root] = [s for s in sink.spans() if s.trace_id == trace_id]
        attributes = attributes_to_dict(root.attributes)
        assert {k: v for k, v in attributes.items() if k.startswith("eval.")} == {"eval.toy.skipped": why}
    [carrier] = [attributes_to_dict(s.attributes) for s in sink.spans() if s.name == "evaluate_session"]
    assert carrier["eval.toy_session.skipped"] == why and carrier["eval.session.trace_count"] == 2


@pytest.mark.parametrize("value", [-1, 257, "two"])
def test_scoring_workers_out_of_range_is_a_config_error(value):
    with pytest.raises(ValueError, match="scoring_workers"):
        PipelineSettings(scoring_workers=value)


OTLP = {"otlp": "{endpoint: '127.0.0.1:1', tls: {insecure: true}}"}
ROUTER = "score_router: {table: [{name: failing, when: {label: fail}, exporters: [otlp]}]}"


@pytest.mark.parametrize(
    "exporters, extra, encoded, results",
    [
        (OTLP, "", True, False),
        ({"otlphttp": "{endpoint: 'http://127.0.0.1:1'}"}, "", True, False),
        (OTLP, "logs", True, True),  # evaluation logs are built from the results
        (OTLP, "router", False, True),  # it routes on the results and writes eval.route on the spans
        ({"otlphttp": "{endpoint: 'http://127.0.0.1:1', encoding: json}"}, "", False, True),
        ({**OTLP, "debug": "{}"}, "", False, True),
        ({"file": "{path: /dev/null}"}, "", False, True),
    ],
)
def test_workers_encode_scored_traces_only_when_every_exporter_sends_protobuf(exporters, extra, encoded, results):
    """And send the results back only when the collector reads them."""
    listed = "\n".join(f"  {name}: {settings}" for name, settings in exporters.items())
    config = parse_config(
        f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:0'}}}}}}}}
processors:
  assembler: {{scoring_workers: 2}}
  embedding_metrics: {{embedder: {{type: static}}}}
  {ROUTER if extra == "router" else ""}
exporters:
{listed}
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [assembler, embedding_metrics{", score_router" if extra == "router" else ""}]
      exporters: [{", ".join(exporters)}]
    {"logs: {exporters: [otlp]}" if extra == "logs" else ""}
"""
    )
    setup = Service(config).workers.setup  # built, not started: no process yet
    assert (setup.encode_traces, setup.send_results) == (encoded, results)


@pytest.mark.parametrize("encoded", [True, False])
def test_workers_replace_the_results_a_trace_arrives_with(encoded, sink, start_collector):
    """A trace scored before (a chained collector): the worker's prepared scores would be
    appended, so the collector writes them, replacing the earlier ones, whether the
    workers encode whole traces (every exporter sends protobuf) or not."""
    config = sink_config(
        sink,
        processors="[assembler, toy_metric]",
        extra_processors=TOY,
        assembler="trace_wait: 50ms, scoring_workers: 1",
    )
    if not encoded:  # a debug exporter beside: the workers prepare the anchor's fields only
        config = config.replace("exporters:\n", "exporters:\n  debug: {verbosity: basic}\n", 1)
        config = config.replace("exporters: [otlp]", "exporters: [otlp, debug]")
    collector = start_collector(config)
    assert collector.service.workers.setup.encode_traces is encoded
    fresh, again = new_trace_id(), new_trace_id()
    send(collector.grpc_port, request_of([span(fresh, "fresh", attributes=AGENT_ROOT), scored_before(again, "again")]))
    assert wait_until(lambda: len(sink.spans()) == 2, timeout_s=30)
    assert_rescored(exported_span(sink, "again"), span_count=1)
    assert [e["eval.evaluator"] for e in evaluation_events(exported_span(sink, "fresh"))] == ["code"]
