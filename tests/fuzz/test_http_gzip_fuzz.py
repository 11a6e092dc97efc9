"""The HTTP receiver's gzip path, fuzzed through the real aiohttp server on loopback.

Bodies: valid requests gzipped (protobuf and OTLP/JSON), cut short, bit-flipped, bombs
that inflate past the body limit, incompressible bodies over it raw. Each answer is
compared with an oracle built on Python's own gzip reader: 200 exactly when the body
inflates within the limit to a usable request, 413 when it is too large, 400 otherwise
(where the order of the checks allows either of 400 and 413, both are accepted), never
5xx. Every span of a 200 reaches the backend.
"""

from __future__ import annotations

import gzip
import http.client
import logging

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.support.event_loop_thread import EventLoopThread
from tests.support.fuzz_strategies import fixture_documents, fixture_requests, flipped
from tests.support.otlp_sink import OtlpSink
from tests.support.receiver_oracle import JSON, PROTOBUF, expected_http
from tests.support.running import RunningCollector, sink_config, wait_until
from tests.support.spans import new_trace_id, request_of, span

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def collector():
    loop = EventLoopThread()
    sink = loop.run(OtlpSink().start())
    # Most captured requests hold one span of a trace whose root is elsewhere: released at
    # trace_timeout, made short here.
    config = sink_config(sink, assembler="trace_wait: 50ms, trace_timeout: 300ms").replace(
        "http: {endpoint: 127.0.0.1:0}", f"http: {{endpoint: 127.0.0.1:0, max_request_body_size: {LIMIT}}}"
    )
    running = RunningCollector(loop, config)
    try:
        yield running, sink
    finally:
        running.stop()
        loop.run(sink.stop())
        loop.close()


def post(port: int, body: bytes, content_type: str, encoding: str = "gzip") -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(
            "POST", "/v1/traces", body=body, headers={"Content-Type": content_type, "Content-Encoding": encoding}
        )
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def compressed_documents() -> st.SearchStrategy[tuple[bytes, str]]:
    protobuf = st.sampled_from(fixture_requests()).map(lambda data: (gzip.compress(data), PROTOBUF))
    json = st.sampled_from(fixture_documents()).map(lambda line: (gzip.compress(line.encode()), JSON))
    return st.one_of(protobuf, json)


def _bomb(size: int) -> bytes:
    return gzip.compress(b"\x00" * size, compresslevel=9)


BODIES = st.one_of(
    compressed_documents(),
    compressed_documents().flatmap(
        lambda d: st.tuples(st.integers(0, max(0, len(d[0]) - 1)).map(lambda n, b=d[0]: b[:n]), st.just(d[1]))
    ),  # cut short
    compressed_documents().flatmap(lambda d: st.tuples(flipped(d[0], rounds=2), st.just(d[1]))),  # damaged
    st.tuples(st.integers(LIMIT + 1, 64 * LIMIT).map(_bomb), st.sampled_from([PROTOBUF, JSON])),  # bombs
    st.tuples(st.integers(LIMIT - 8, LIMIT).map(_bomb), st.just(PROTOBUF)),  # just within: inflated, then 400
    st.tuples(
        st.binary(min_size=LIMIT + 1, max_size=LIMIT + 600).map(  # incompressible, over the limit raw
            lambda raw: gzip.compress(raw * 1)[: LIMIT + 100]
        ),
        st.just(PROTOBUF),
    ),
    st.tuples(st.binary(max_size=64), st.sampled_from([PROTOBUF, JSON])),  # not gzip at all
)


class ServerErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_gzip_bodies_are_answered_as_pythons_gzip_reader_reads_them(collector):
    running, sink = collector
    port = running.http_port
    accepted: set[tuple[bytes, bytes]] = set()
    statuses: dict[int, int] = {}
    errors = ServerErrors()
    for name in ("aiohttp", "spanscore"):
        logging.getLogger(name).addHandler(errors)

    @settings(max_examples=150, deadline=None)
    @given(BODIES)
    def post_one(case):
        body, content_type = case
        expected = expected_http(body, content_type, "gzip", LIMIT)
        status = post(port, body, content_type)
        statuses[status] = statuses.get(status, 0) + 1
        event(f"status {status}")
        assert status in expected.allowed, (status, expected.allowed, len(body))
        if status == 200:
            accepted.update(expected.spans())

    try:
        post_one()
    finally:
        for name in ("aiohttp", "spanscore"):
            logging.getLogger(name).removeHandler(errors)
    print(f"gzip fuzz: {sum(statuses.values())} requests, answers {dict(sorted(statuses.items()))}")
    assert not errors.records, [r.getMessage()[:300] for r in errors.records]
    assert statuses.get(200) and statuses.get(400) and statuses.get(413), statuses
    assert wait_until(lambda: accepted <= {(s.trace_id, s.span_id) for s in sink.spans()}, timeout_s=15)


def test_a_body_of_several_gzip_members_is_read_whole(collector):
    running, sink = collector
    first = request_of([span(new_trace_id(), "first member")]).SerializeToString()
    second = request_of([span(new_trace_id(), "second member")]).SerializeToString()
    # RFC 1952: a gzip file is one or more members; the concatenated protobuf is one
    # request with both resource_spans.
    status = post(running.http_port, gzip.compress(first) + gzip.compress(second), PROTOBUF)
    assert status == 200
    assert wait_until(lambda: {"first member", "second member"} <= {s.name for s in sink.spans()}, timeout_s=2)


def test_trailing_garbage_after_the_gzip_member_is_400(collector):
    running, _ = collector
    body = gzip.compress(request_of([span(new_trace_id(), "then garbage")]).SerializeToString()) + b"garbage"
    assert post(running.http_port, body, PROTOBUF) == 400
