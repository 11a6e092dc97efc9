"""The protobuf path both receivers take, fuzzed: parse, assemble, score, export.

Random bytes and damaged valid requests either parse or raise `DecodeError` (which the
receivers answer with 400 / INVALID_ARGUMENT). Whatever parses goes through the
assembler and a pipeline scoring every trace (embedding and session metrics) into a
`MemoryExporter`, exactly as a receiver hands it over: the only exceptions are the
documented `InvalidRequest` (every span invalid) and `ConsumerFull`, every span with
valid ids comes out once, the others are counted as rejected with a short reason, and
nothing is logged at warning level or above (a processor failing, the normalizer
falling back) for any of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from google.protobuf.message import DecodeError
from hypothesis import event, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.consumer import ConsumerFull
from spanscore.exporters.memory import MemoryExporter
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.pipeline.wiring import Pipeline
from spanscore.processors.embedding_metrics import EmbeddingMetrics, EmbeddingMetricsConfig
from spanscore.processors.session_metrics import SessionMetrics, SessionMetricsConfig
from spanscore.receivers.ingest import InvalidRequest
from spanscore.receivers.memory import MemoryReceiver
from tests.support.fuzz_strategies import fixture_requests, flipped, requests, with_bad_ids
from tests.support.receiver_oracle import all_spans, valid_ids
from tests.support.spans import new_trace_id, request_of, span

MAX_MESSAGE = 600


def parse(data: bytes) -> ExportTraceServiceRequest | None:
    try:
        request = ExportTraceServiceRequest.FromString(data)
    except DecodeError:
        event("DecodeError")
        return None
    event("parsed")
    return request


def key(span) -> tuple[bytes, bytes, bytes, str]:
    return span.trace_id, span.span_id, span.parent_span_id, span.name


def check_assembler(request: ExportTraceServiceRequest) -> None:
    spans = all_spans(request)
    valid = [s for s in spans if valid_ids(s)]
    assembler = Assembler(PipelineSettings())
    outcome = assembler.add(request, now=0.0)
    assert (outcome.accepted, outcome.rejected) == (len(valid), len(spans) - len(valid))
    assert (outcome.error is None) == (outcome.rejected == 0)
    assert outcome.error is None or len(outcome.error) < MAX_MESSAGE
    assert assembler.buffered_spans == len(valid)
    released = assembler.pop_all()
    assert sorted(key(s) for trace in released for s, _ in trace.spans()) == sorted(key(s) for s in valid)
    assert assembler.buffered_spans == 0 and len(assembler) == 0


class Complaints(logging.Handler):
    """Records warning-and-above log records of spanscore itself."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def through_pipeline(
    request: ExportTraceServiceRequest, agent_traces_only: bool = False
) -> tuple[str, Counter, int]:
    """Send `request` as a receiver would; the outcome, the spans exported (by key) and the
    spans the response said were rejected."""
    embedding = EmbeddingMetrics(
        "embedding_metrics", EmbeddingMetricsConfig.model_validate({"embedder": {"type": "hashing"}})
    )
    session = SessionMetrics("session_metrics", SessionMetricsConfig())
    processors = [("embedding_metrics", embedding), ("session_metrics", session)]
    exporter = MemoryExporter()
    clock = [0.0]
    config = PipelineSettings(
        trace_wait=1.0,
        trace_timeout=30.0,
        session_idle=60.0,
        scoring_concurrency=2,
        score={"agent_traces_only": agent_traces_only},
    )
    pipeline = Pipeline(Assembler(config), processors, [exporter], clock=lambda: clock[0])
    for _, processor in processors:
        await processor.start()
    await pipeline.start()
    outcome, rejected = "accepted", 0
    try:
        response = MemoryReceiver(pipeline.intake).send(request)
        rejected = response.partial_success.rejected_spans
        if rejected:
            assert 0 < len(response.partial_success.error_message) < MAX_MESSAGE
    except InvalidRequest as exc:
        outcome = "InvalidRequest"
        assert len(str(exc)) < MAX_MESSAGE
    except ConsumerFull:  # nothing is held yet: it cannot be full
        raise AssertionError("ConsumerFull with an empty pipeline") from None
    clock[0] = 100.0  # past trace_timeout and session_idle: everything is due
    pipeline.tick()
    await pipeline.settle()
    await pipeline.drain(time.monotonic() + 10)
    for _, processor in processors:
        await processor.shutdown(time.monotonic() + 5)
    await exporter.shutdown(time.monotonic() + 5)
    assert pipeline.counts.held_spans == 0
    exported = Counter(key(s) for trace in exporter.exported for s in trace.spans)
    return outcome, exported, rejected


def check_pipeline(request: ExportTraceServiceRequest) -> None:
    spans = all_spans(request)
    sent = Counter(key(s) for s in spans if valid_ids(s))
    invalid = len(spans) - sum(sent.values())
    complaints = Complaints()
    logger = logging.getLogger("spanscore")
    logger.addHandler(complaints)
    try:
        outcome, exported, rejected = asyncio.run(through_pipeline(request))
    finally:
        logger.removeHandler(complaints)
    event(f"pipeline: {outcome}")
    if outcome == "InvalidRequest":
        assert not sent and invalid > 0
    else:
        assert rejected == invalid
    # Session carriers are spans of new traces of their own; every sent trace's valid
    # spans came out exactly once.
    trace_ids = {k[0] for k in sent}
    assert Counter({k: n for k, n in exported.items() if k[0] in trace_ids}) == sent
    assert not complaints.records, [r.getMessage()[:300] for r in complaints.records]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_parse_or_raise_decode_error(data):
    request = parse(data)
    if request is not None:
        check_assembler(request)


@settings(max_examples=250, deadline=None)
@given(st.sampled_from(fixture_requests()).flatmap(flipped))
def test_damaged_requests_parse_or_raise_decode_error_and_assemble(data):
    request = parse(data)
    if request is not None:
        check_assembler(request)


VALID = st.one_of(st.sampled_from(fixture_requests()), requests().map(ExportTraceServiceRequest.SerializeToString))
BAD_IDS = requests().flatmap(with_bad_ids).map(ExportTraceServiceRequest.SerializeToString)


@settings(max_examples=150, deadline=None)
@given(st.one_of(VALID, BAD_IDS).flatmap(lambda data: st.one_of(st.just(data), flipped(data))))
def test_whatever_parses_goes_through_the_pipeline_without_undocumented_errors(data):
    request = parse(data)
    if request is not None:
        check_pipeline(request)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_huge_service_name_is_not_logged_whole():
    request = request_of([span(new_trace_id(), "GET /health")], service="S" * 200_000)  # not an agent trace
    records = Records()
    logger = logging.getLogger("spanscore")
    level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        outcome, exported, _ = asyncio.run(through_pipeline(request, agent_traces_only=True))
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    assert outcome == "accepted" and sum(exported.values()) == 1
    assert records.records  # the once-per-service notice was given...
    assert max(len(r.getMessage()) for r in records.records) < 2_000  # ...but not with the name whole
