"""`score_router`: traces go to exporters chosen by their scores. Two loopback backends:
a review queue gets every failing trace; the main backend gets every failing trace and
a tenth of the passing ones (by trace id), and the rest are dropped and counted."""

from __future__ import annotations

import pytest

from spanscore.config.loader import ConfigError, parse_config
from spanscore.core.attributes import attributes_to_dict
from spanscore.core.result import MetricResult
from spanscore.core.sampling import trace_id_sampled
from spanscore.pipeline.score_router import Condition, RouteConfig, ScoreRouter, ScoreRouterConfig
from tests.support.factories import TEST_FACTORIES
from tests.support.otlp_client import send
from tests.support.otlp_sink import OtlpSink
from tests.support.running import wait_until
from tests.support.spans import AGENT_ROOT, new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import TOY

ROUTER = """\
  score_router:
    default_exporters: []
    table:
      - name: failing
        when: {label: [fail, error]}
        exporters: [otlp/review, otlp/main]
      - name: passing_sample
        when: {label: pass, every: true}
        exporters: [otlp/main]
        sample_ratio: 0.1"""


def config(main: OtlpSink, review: OtlpSink, router: str = ROUTER) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
{TOY}
{router}
exporters:
  otlp/main: {{endpoint: 127.0.0.1:{main.grpc_port}, tls: {{insecure: true}}}}
  otlp/review: {{endpoint: 127.0.0.1:{review.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, toy_metric, score_router],
              exporters: [otlp/main, otlp/review]}}
"""


@pytest.fixture
def review(loop_thread):
    backend = loop_thread.run(OtlpSink().start())
    yield backend
    loop_thread.run(backend.stop())


def send_trace(collector, passing: bool) -> bytes:
    """The toy metric scores a trace by its span count: 4 spans pass (1.0), 1 fails (0.25)."""
    trace_id, root_id = new_trace_id(), new_span_id()
    spans = [span(trace_id, "agent", span_id=root_id, attributes=AGENT_ROOT)]
    spans += [span(trace_id, "step", parent=root_id) for _ in range(3 if passing else 0)]
    send(collector.grpc_port, request_of(spans))
    return trace_id


def test_failing_traces_reach_review_and_a_share_of_passing_ones_reach_main(sink, review, start_collector):
    collector = start_collector(config(sink, review))
    failing = {send_trace(collector, passing=False) for _ in range(10)}
    passing = {send_trace(collector, passing=True) for _ in range(60)}
    assert wait_until(lambda: collector.pipeline.counts.exported_traces == 70, timeout_s=15)
    kept = {t for t in passing if trace_id_sampled(t, 0.1)}
    assert wait_until(lambda: {s.trace_id for s in sink.spans()} == failing | kept, timeout_s=10)
    assert {s.trace_id for s in review.spans()} == failing
    assert collector.pipeline.counts.routed_out_traces == 60 - len(kept)
    routes = {s.trace_id: attributes_to_dict(s.attributes).get("eval.route") for s in sink.spans() if s.name == "agent"}
    assert {routes[t] for t in failing} == {"failing"} and {routes[t] for t in kept} <= {"passing_sample"}
    assert len(sink.spans()) == 10 + 4 * len(kept)  # whole traces, every span


def test_unscored_traces_follow_the_default(sink, review, start_collector):
    router = ROUTER.replace("default_exporters: []", "default_exporters: [otlp/review]")
    collector = start_collector(config(sink, review, router))
    trace_id = new_trace_id()
    send(collector.grpc_port, request_of([span(trace_id, "GET /health")]))  # not an agent's trace: unscored
    assert wait_until(lambda: any(s.trace_id == trace_id for s in review.spans()))
    assert not any(s.trace_id == trace_id for s in sink.spans())


def test_routes_may_name_only_exporters_of_the_pipeline():
    fake = type("S", (), {"grpc_port": 1})()
    with pytest.raises(ConfigError) as error:
        parse_config(
            config(fake, fake, ROUTER.replace("[otlp/main]\n", "[otlp/elsewhere]\n")), factories=TEST_FACTORIES
        )
    assert (
        "processors.score_router: exporter 'otlp/elsewhere' is not in service.pipelines.traces.exporters"
        in error.value.problems
    )
    with pytest.raises(ConfigError) as error:
        parse_config(config(fake, fake, ROUTER.replace("label: pass,", "label: passed,")), factories=TEST_FACTORIES)
    assert any("label must be one of pass, fail, error" in p for p in error.value.problems)


def result(name: str, score: float | None) -> MetricResult:
    return MetricResult(name=name, score=score, error=None if score is not None else "judge down")


@pytest.mark.parametrize(
    ("condition", "results", "holds"),
    [
        ({"label": "fail"}, [result("a", 0.9), result("b", 0.1)], True),
        ({"label": "fail", "every": True}, [result("a", 0.9), result("b", 0.1)], False),
        ({"label": "pass", "every": True}, [result("a", 0.9), result("b", 0.6)], True),
        ({"label": "pass", "every": True}, [], False),  # nothing scored is not "every metric passed"
        ({"label": "error"}, [result("a", None)], True),
        ({"metric": "b", "score_below": 0.5}, [result("a", 0.1), result("b", 0.5)], False),
        ({"metric": "a", "score_below": 0.5}, [result("a", 0.1), result("b", 0.5)], True),
        ({"score_at_least": 0.8}, [result("a", None), result("b", 0.8)], True),
        ({"metric": "c"}, [result("a", 0.1)], False),
    ],
)
def test_conditions(condition, results, holds):
    assert Condition(**condition).holds(results) is holds


def test_a_trace_sampled_out_of_its_route_is_not_sent_to_the_default():
    router = ScoreRouter(
        "score_router",
        ScoreRouterConfig(
            table=[{"when": {"label": "pass"}, "exporters": ["main"], "sample_ratio": 0.0}], default_exporters=["all"]
        ),
    )
    route = router.route([result("a", 0.9)], bytes(16))
    assert route.exporters == frozenset() and route.matched == ()
    assert router.route([result("a", 0.1)], bytes(16)).exporters == frozenset({"all"})


def test_routes_built_in_python_are_named_by_their_position_as_written_ones_are():
    when = Condition(label=["fail"])
    config = ScoreRouterConfig(
        table=[RouteConfig(when=when, exporters=["review"]), RouteConfig(when=when, exporters=["main"])]
    )
    assert [route.name for route in config.table] == ["route0", "route1"]
    assert ScoreRouter("score_router", config).route([result("a", 0.1)], bytes(16)).matched == ("route0", "route1")
