"""Spans recorded from real instrumentation libraries, sent to spanscore over OTLP,
normalize inside the running pipeline to the same agent run, session id included."""

from __future__ import annotations

import pytest

from spanscore.core.otlp_json import encode_request
from tests.support.agent_fixtures import SESSION_ID, SPANS_DIR, assert_weather_run
from tests.support.otlp_client import grpc_export, post
from tests.support.otlp_json import read_requests
from tests.support.running import sink_config, wait_until
from tests.support.spans import assert_forwarded_faithfully

FIXTURES = sorted(path.stem for path in SPANS_DIR.glob("*.jsonl"))


@pytest.mark.parametrize("transport", ["grpc", "http-json"])
@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_spans_normalize_in_the_pipeline(fixture, transport, sink, start_collector):
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, record_agent]",
            extra_processors="  record_agent: {}",
            assembler="trace_wait: 50ms",
        )
    )
    requests = read_requests(SPANS_DIR / f"{fixture}.jsonl")
    for request in requests:
        if transport == "grpc":
            grpc_export(collector.grpc_port, request.SerializeToString())
        else:
            status, _, _ = post(collector.http_port, encode_request(request).encode(), "application/json")
            assert status == 200
    recorder = collector.pipeline.processors[0][1]
    assert wait_until(lambda: len(recorder.traces) == 1)
    [trace] = recorder.traces
    assert trace.session_id == SESSION_ID
    # openai-v2 with content capture `true` records no message content on LLM spans.
    assert_weather_run(trace, content_on_llm_spans=fixture != "genai_v2")
    assert wait_until(
        lambda: (
            len(sink.spans())
            == sum(len(ss.spans) for r in requests for rs in r.resource_spans for ss in rs.scope_spans)
        )
    )
    assert_forwarded_faithfully(requests, sink.requests)


def test_every_convention_has_a_fixture():
    assert set(FIXTURES) >= {"genai_v2", "genai_v2_latest", "openinference", "openllmetry", "openai_agents", "langfuse"}
