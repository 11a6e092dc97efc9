"""The judge through a running collector when it is down, loading, back, or over budget:
spans in over OTLP, a real loopback OpenAI server as the judge, results read back from
the exported spans and spanscore's own metrics from its Prometheus endpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import zlib

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spanscore.core.attributes import attributes_to_dict
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES, NO_TOOL_CALLS, NO_TOOLS
from tests.support.agent_session import send_turn
from tests.support.judge_answers import schema_judge
from tests.support.openai_server import ErrorReply, OpenAIServer, RecordedRequest, Reply
from tests.support.ports import free_port
from tests.support.running import scraped_samples, sink_config, wait_until
from tests.support.spans import new_trace_id

# No tools offered or called: these are skipped without the judge, `.skipped` saying why.
SKIPPED = {"tool_correctness": NO_TOOLS, "argument_correctness": NO_TOOL_CALLS}
JUDGED = [m for m in METRIC_NAMES if m not in SKIPPED]
FAST = "max_retries: 1, initial_backoff: 50ms, max_backoff: 200ms"


def judge_metrics(base_url: str, judge: str = "", extra: str = "") -> str:
    return (
        f"  judge_metrics: {{judge: {{model: judge-test, base_url: '{base_url}', api_key: test-key, {FAST}"
        f"{judge}}}{extra}}}"
    )


def roots(sink) -> dict[str, dict]:
    return {s.name: attributes_to_dict(s.attributes) for s in sink.spans() if not s.parent_span_id}


class Loading:
    """503 "Loading model" until `up`, then answers from the schema."""

    def __init__(self) -> None:
        self.up = False
        self.refused = 0  # requests answered 503
        self.answer = schema_judge(score=0.8)

    def __call__(self, request: RecordedRequest) -> Reply | ErrorReply:
        if self.up:
            return self.answer(request)
        self.refused += 1
        return ErrorReply(503, "Loading model")


def test_a_judge_down_then_loading_then_back_judges_every_trace(sink, start_collector):
    handler = Loading()
    judge = OpenAIServer(handler=handler, port=free_port())  # not started: connections are refused
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, judge_metrics]",
            assembler="trace_wait: 50ms",
            extra_processors=judge_metrics(judge.base_url),
        )
    )
    try:
        for i in range(4):
            send_turn(collector, f"turn {i}")
            time.sleep(0.25)
        assert sink.spans() == []  # held, not exported with errors
        judge.start()
        time.sleep(1.0)
        assert sink.spans() == [] and judge.requests  # loading: probed, still held
        handler.up = True
        assert wait_until(lambda: len(sink.spans()) == 4, timeout_s=15)
    finally:
        judge.stop()
    for name, attributes in roots(sink).items():
        assert not [k for k in attributes if k.endswith(".error")], (name, attributes)
        assert {attributes[f"eval.{m}.score"] for m in JUDGED} == {0.8}
        assert {m: attributes[f"eval.{m}.skipped"] for m in SKIPPED} == SKIPPED
    [processor] = collector.service.processors
    assert processor.judge.breaker.opened == 1 and processor.judge.breaker.held == 0


def test_past_max_judge_wait_the_trace_leaves_with_errors_saying_the_judge_was_unreachable(sink, start_collector):
    port = free_port()  # nothing ever listens there
    base_url = f"http://127.0.0.1:{port}/v1"
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, judge_metrics]",
            assembler="trace_wait: 50ms",
            extra_processors=judge_metrics(base_url, ", max_judge_wait: 1s"),
        )
    )
    started = time.monotonic()
    send_turn(collector, "turn")
    assert wait_until(lambda: len(sink.spans()) == 1, timeout_s=10)
    assert 1.0 <= time.monotonic() - started < 5.0
    [root] = sink.spans()
    attributes = attributes_to_dict(root.attributes)
    message = f"judge 'judge-test' at {base_url} unreachable for 1s (max_judge_wait): connection refused"
    assert {attributes[f"eval.{m}.error"] for m in JUDGED} == {message}
    assert {m: attributes[f"eval.{m}.skipped"] for m in SKIPPED} == SKIPPED
    events = [attributes_to_dict(e.attributes) for e in root.events]
    assert {e.get("error.type") for e in events if e["gen_ai.evaluation.name"] in JUDGED} == {"judge_unavailable"}


ONLY_CONFIDENCE = (
    ", metrics: {" + ", ".join(f"{m}: {{enabled: false}}" for m in METRIC_NAMES if m != "confidence") + "}"
)


@pytest.mark.parametrize("workers", [0, 1], ids=["in process", "in a scoring worker"])
def test_over_budget_a_traces_judge_metrics_are_skipped_and_the_spend_is_exported(sink, start_collector, workers):
    prometheus = free_port()
    with OpenAIServer(handler=schema_judge(score=0.8)) as judge:  # 120 + 30 tokens per reply
        assembler = "trace_wait: 50ms" + (f", scoring_workers: {workers}" if workers else "")
        config = sink_config(
            sink,
            processors="[assembler, judge_metrics]",
            assembler=assembler,
            extra_processors=judge_metrics(judge.base_url, ", budget: {requests_per_hour: 3}", ONLY_CONFIDENCE),
        )
        config = config.replace(
            "exporters:\n  otlp:", f"exporters:\n  prometheus: {{endpoint: 127.0.0.1:{prometheus}}}\n  otlp:", 1
        )
        config += "    metrics: {exporters: [prometheus], export_interval: 100ms}\n"
        collector = start_collector(config)
        for i in range(4):  # one at a time, so the fourth is the one over the budget
            send_turn(collector, f"turn {i}")
            assert wait_until(lambda i=i: len(sink.spans()) == i + 1, timeout_s=10)
        assert len(judge.requests_to("/chat/completions")) == 3
    found = roots(sink)
    for i in range(3):
        assert found[f"turn {i}"]["eval.confidence.score"] == 0.8 and found[f"turn {i}"]["eval.judge.calls"] == 1
    skipped = {k: v for k, v in found["turn 3"].items() if k.startswith("eval.")}
    assert skipped == {
        "eval.confidence.skipped": "judge budget exhausted: 3 requests in the last hour (requests_per_hour: 3)",
        "eval.judge.calls": 0,
        "eval.judge.input_tokens": 0,
        "eval.judge.output_tokens": 0,
    }
    [turn_3] = [s for s in sink.spans() if s.name == "turn 3"]
    assert list(turn_3.events) == []  # no evaluation result: skipped is not a failure

    def samples() -> dict[tuple, float]:
        return scraped_samples(prometheus)

    assert wait_until(lambda: samples().get(("spanscore_judge_budget_refused_requests_total", ())) == 1.0)
    spend = {name: value for (name, labels), value in samples().items() if name.startswith("spanscore_judge")}
    assert spend.pop("spanscore_judge_request_duration_seconds_total") > 0
    assert spend == {
        "spanscore_judge_requests_total": 3.0,
        "spanscore_judge_input_tokens_total": 360.0,
        "spanscore_judge_output_tokens_total": 90.0,
        "spanscore_judge_breaker_state": 0.0,
        "spanscore_judge_held_calls": 0.0,
        "spanscore_judge_concurrency_limit": 2.0,  # where the judge starts; three answers do not grow it
        "spanscore_judge_budget_refused_requests_total": 1.0,
        "spanscore_judge_budget_remaining_requests": 0.0,  # no token cap: no remaining-tokens gauge
    }
    labels = {
        dict(labels).get("gen_ai_evaluation_score_label")
        for (name, labels) in samples()
        if name == "gen_ai_evaluation_results_total"
    }
    assert labels == {"pass"}  # three passes; the skipped one is no "error"


def test_two_scoring_workers_share_one_judge_budget(sink, start_collector):
    with OpenAIServer(handler=schema_judge(score=0.8)) as judge:
        collector = start_collector(
            sink_config(
                sink,
                processors="[assembler, judge_metrics]",
                assembler="trace_wait: 50ms, scoring_workers: 2",
                extra_processors=judge_metrics(judge.base_url, ", budget: {requests_per_hour: 3}", ONLY_CONFIDENCE),
            )
        )
        # Trace ids that go to worker 0, 1, 0, 1 (a trace without a session goes by its id):
        # each worker alone would have a budget left for its second trace.
        ids: list[bytes] = []
        while len(ids) < 4:
            trace_id = new_trace_id()
            if zlib.crc32(trace_id) % 2 == len(ids) % 2:
                ids.append(trace_id)
        for i, trace_id in enumerate(ids):  # one at a time, so the fourth is the one over the budget
            send_turn(collector, f"turn {i}", trace_id)
            assert wait_until(lambda i=i: len(sink.spans()) == i + 1, timeout_s=10)
        assert len(judge.requests_to("/chat/completions")) == 3
    found = roots(sink)
    assert [found[f"turn {i}"].get("eval.confidence.score") for i in range(4)] == [0.8, 0.8, 0.8, None]
    assert found["turn 3"]["eval.confidence.skipped"].startswith("judge budget exhausted: 3 requests")


def test_what_a_scoring_workers_judges_spent_still_counts_after_it_is_killed(sink, start_collector):
    with OpenAIServer(handler=schema_judge(score=0.8)) as judge:  # 120 + 30 tokens per reply
        collector = start_collector(
            sink_config(
                sink,
                processors="[assembler, judge_metrics]",
                assembler="trace_wait: 50ms, scoring_workers: 1",
                extra_processors=judge_metrics(judge.base_url, "", ONLY_CONFIDENCE),
            )
        )
        workers = collector.service.workers

        def spent(field: str) -> float:
            return sum(getattr(figures, field) for figures in workers.judge_telemetry())

        send_turn(collector, "before")
        assert wait_until(lambda: spent("requests") == 1, timeout_s=10)  # reported within a second
        [pid] = workers.pids
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: workers.restarts == 1 and workers.pids != [pid], timeout_s=10)
        assert spent("requests") == 1 and spent("input_tokens") == 120
        send_turn(collector, "after")
        assert wait_until(lambda: len(sink.spans()) == 2, timeout_s=30)
        assert wait_until(lambda: spent("requests") == 2, timeout_s=10)
        assert (spent("input_tokens"), spent("output_tokens")) == (240, 60)
        assert len(judge.requests_to("/chat/completions")) == 2


@pytest.mark.slow
def test_a_judge_down_for_a_minute_then_back_judges_every_trace_with_the_judges_default_settings(sink, tmp_path):
    """The reported case, at full length: `spanscore run` with the judge's default retry,
    backoff and max_judge_wait; the judge refuses connections for 30 s, answers 503 while
    "loading" for 30 s more, then answers. A trace arrives every 2 s throughout. `max_hold`
    is raised past the outage so every trace waits for its judge here, its held calls
    counted (tests/e2e/test_max_hold.py has the traces leaving before the judge answers)."""
    judge_port, grpc_port, health_port, prometheus = free_port(), free_port(), free_port(), free_port()
    handler = Loading()
    judge = OpenAIServer(handler=handler, port=judge_port)
    api_key = "sk-test-" + "k3Y" * 10
    config = tmp_path / "config.yaml"
    config.write_text(f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{grpc_port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 100ms, max_hold: 10m}}
  judge_metrics: {{judge: {{model: judge-test, base_url: '{judge.base_url}', api_key: '{api_key}'}}}}
exporters:
  otlp: {{endpoint: '127.0.0.1:{sink.grpc_port}', tls: {{insecure: true}}}}
  prometheus: {{endpoint: '127.0.0.1:{prometheus}'}}
extensions:
  health_check: {{endpoint: '127.0.0.1:{health_port}'}}
service:
  extensions: [health_check]
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, judge_metrics], exporters: [otlp]}}
    metrics: {{exporters: [prometheus], export_interval: 1s}}
""")
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "spanscore", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    collector = type("Collector", (), {"grpc_port": grpc_port})()

    def scrape() -> dict[str, float]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{prometheus}/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return {}
        return {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("spanscore_judge")
        }

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        assert wait_until(ready, timeout_s=30), "spanscore did not start"
        started = time.monotonic()
        names = []
        for i in range(30):
            while time.monotonic() < started + 2 * i:
                time.sleep(0.05)
            if i == 15:
                judge.start()  # 30 s refused; now 30 s of 503 "Loading model"
            names.append(f"turn {i}")
            send_turn(collector, names[-1])
        while time.monotonic() < started + 59:
            time.sleep(0.05)
        during = scrape()
        assert sink.spans() == []  # every trace held, none exported with an error
        time.sleep(1.0)
        handler.up = True  # back after 60 s
        assert wait_until(lambda: len(sink.spans()) == 30, timeout_s=40)
        recovered_after = time.monotonic() - started - 60
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        judge.stop()
    found = roots(sink)
    assert sorted(found) == sorted(names)
    for name, attributes in found.items():
        assert not [k for k in attributes if k.endswith(".error")], (name, attributes)
        assert [k for k in attributes if k.endswith(".skipped")] == [f"eval.{m}.skipped" for m in SKIPPED]
        assert {attributes[f"eval.{m}.score"] for m in JUDGED} == {0.8}
    # At t=59 s the breaker is open and holds the first calls of every trace: extraction
    # and confidence (the other metrics wait for the extraction; the tool metrics are skipped).
    assert during["spanscore_judge_breaker_state"] == 1.0 and during["spanscore_judge_held_calls"] == 2 * 30
    # By hand: the first trace's refusals open the breaker within its first second (t0); it
    # probes 0.5, 1, 2, 4, 8, 16, then 20 s (max_backoff) apart: at t0 + 0.5, 1.5, 3.5, 7.5,
    # 15.5 (refused), 31.5 and 51.5 (503), 71.5 (answered). So two requests met the loading
    # judge, it was seen back 11.5 s (+ t0) after it came back, not a probe later (+20 s), and
    # then each trace took its 6 calls (extraction, five metrics; no tools offered or called
    # for tool_correctness and argument_correctness): 2 + 6 x 30 requests reached it.
    assert handler.refused == 2 and 10 < recovered_after < 20
    assert len(judge.requests_to("/chat/completions")) == 2 + 6 * 30
    log = stderr_path.read_text()
    assert log.count("is unreachable (5 failures in a row") == 1 and log.count("answers again after") == 1
    assert "HTTP Request" not in log and api_key not in log
