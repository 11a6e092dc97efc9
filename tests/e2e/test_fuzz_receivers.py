"""A fuzz run against the running receivers: `spanscore run`, 10,000+ malformed requests.

One `spanscore run` process (both receivers, the embedding and session metrics, an OTLP
exporter to a loopback backend) gets, concurrently and in a seeded random order, over
HTTP: mutated protobuf, mutated OTLP/JSON, wrong content types and encodings, corrupt
gzip and deflate, oversized bodies and gzip bombs, requests with invalid ids; over gRPC:
mutated and random protobuf bytes, invalid ids, oversized messages. Mixed in, a few
hundred well-formed agent traces with known span ids over both.

Each answer is checked against `tests.support.receiver_oracle`, which works out independently what
the body is: a malformed request is refused with a 4xx (HTTP) or INVALID_ARGUMENT
(gRPC; RESOURCE_EXHAUSTED when oversized), never a 5xx, INTERNAL or UNKNOWN. A mutated
request that still decodes to usable spans is accepted, counted apart, and must be
accepted correctly: its partial success counts exactly its invalid spans, and its
valid spans reach the backend like every span of the well-formed traces. The process
stays up, writes no traceback and no overlong log line, and exits 0 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from spanscore.core.otlp_json import encode_request
from tests.support.fuzz_strategies import OTLP_KEYS, fixture_documents, fixture_requests, json_paths
from tests.support.otlp_client import EXPORT
from tests.support.ports import free_port
from tests.support.receiver_oracle import JSON, PROTOBUF, Expected, expected_grpc, expected_http
from tests.support.running import health_check_ok, wait_until
from tests.support.spans import AGENT_ROOT, request_of, span

ROOT = Path(__file__).resolve().parents[2]
SEED = 20_260_501
MALFORMED = 10_400
VALID_TRACES = 300
CONCURRENCY = 32
LIMIT = 256 * 1024  # HTTP max_request_body_size, and the gRPC message limit (0.25 MiB)
MAX_LOG_LINE = 2_000

CONFIG = """
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: '127.0.0.1:{grpc}', max_recv_msg_size_mib: 0.25}}
      http: {{endpoint: '127.0.0.1:{http}', max_request_body_size: {limit}}}
processors:
  assembler: {{trace_wait: 200ms, trace_timeout: 2s}}
  embedding_metrics: {{embedder: {{type: hashing}}}}
  session_metrics: {{}}
exporters:
  otlp: {{endpoint: '127.0.0.1:{sink}', tls: {{insecure: true}},
         retry_on_failure: {{initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 10s}}}}
extensions: {{health_check: {{endpoint: '127.0.0.1:{health}'}}}}
service:
  extensions: [health_check]
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, embedding_metrics, session_metrics], exporters: [otlp]}}
"""


@dataclass
class Case:
    kind: str
    transport: str  # "http" or "grpc"
    body: bytes
    content_type: str = PROTOBUF
    encoding: str = ""
    valid: bool = False  # well-formed traffic, not a malformed request

    def expected(self) -> Expected:
        if self.transport == "grpc":
            return expected_grpc(self.body, LIMIT)
        return expected_http(
            self.body, self.content_type or "application/octet-stream", self.encoding or "identity", LIMIT
        )


# Mutators (seeded `random`, not hypothesis: ten thousand inputs in one run) --------------


# Stands for a number literal longer than Python's int conversion limit (4,300 digits),
# written unquoted into the JSON text by `dumps`.
BIG_NUMBER = "\x00big number\x00"


def dumps(document, rng: random.Random) -> str:
    text = json.dumps(document)
    while json.dumps(BIG_NUMBER) in text:
        text = text.replace(json.dumps(BIG_NUMBER), "9" * rng.randint(4_000, 5_000), 1)
    return text


class Mutator:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def flip(self, data: bytes, rounds: int = 3) -> bytes:
        rng, buffer = self.rng, bytearray(data)
        for _ in range(rng.choice([1, 1, 1, *range(2, rounds + 1)])):
            if not buffer:
                buffer.extend(rng.randbytes(rng.randint(1, 8)))
                continue
            at = rng.randrange(len(buffer))
            edit = rng.choice(["bit", "bit", "byte", "insert", "delete", "truncate", "varint"])
            if edit == "bit":
                buffer[at] ^= 1 << rng.randrange(8)
            elif edit == "byte":
                buffer[at] = rng.randrange(256)
            elif edit == "insert":
                buffer[at:at] = rng.randbytes(rng.randint(1, 8))
            elif edit == "delete":
                del buffer[at : at + rng.randint(1, 8)]
            elif edit == "truncate":
                del buffer[at:]
            else:
                buffer[at : at + 1] = rng.choice([b"\xff\xff\xff\xff\x0f", b"\x80" * 9 + b"\x01", b"\xff" * 10])
        return bytes(buffer)

    def json_value(self, depth: int = 0):
        rng = self.rng
        choice = rng.randrange(12 if depth < 3 else 9)
        if choice < 9:
            return [
                None,
                True,
                rng.randint(-(2**70), 2**70),
                rng.random() * 10.0 ** rng.randint(-5, 300),
                float("nan"),
                "",
                "zz",
                "0" * 32,
                rng.randbytes(8).hex() + "x",
            ][choice]
        if choice == 9:
            return [self.json_value(depth + 1) for _ in range(rng.randint(0, 3))]
        if choice == 10:
            return {rng.choice(OTLP_KEYS): self.json_value(depth + 1) for _ in range(rng.randint(0, 3))}
        return BIG_NUMBER

    def mutate_json(self, document, rounds: int = 3):
        rng = self.rng
        for _ in range(rng.randint(1, rounds)):
            paths = json_paths(document)
            path = rng.choice(paths)
            edit = rng.choice(["replace", "delete", "add", "stringify", "id"])
            parent = _lookup(document, path[:-1]) if path else None
            if not path:
                if edit == "replace":
                    document = self.json_value()
                continue
            last = path[-1]
            if edit == "replace":
                parent[last] = self.json_value()
            elif edit == "delete":
                del parent[last]
            elif edit == "add" and isinstance(parent[last], dict):
                parent[last][rng.choice(OTLP_KEYS)] = self.json_value()
            elif edit == "stringify" and isinstance(parent[last], (int, float)) and not isinstance(parent[last], bool):
                parent[last] = str(parent[last])
            elif edit == "id":
                parent[last] = rng.choice(
                    [
                        "",
                        "zz",
                        "0" * 32,
                        "0" * 16,
                        rng.randbytes(rng.randint(1, 20)).hex(),
                        " " + rng.randbytes(8).hex(),
                        "１" * 16,
                    ]
                )
        return document

    def mutate_text(self, text: str) -> str:
        rng = self.rng
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(text))
            edit = rng.choice(["insert", "delete", "truncate"])
            if edit == "insert":
                text = (
                    text[:at]
                    + "".join(rng.choice('{}[]":,0123456789 \\nau-') for _ in range(rng.randint(1, 3)))
                    + text[at:]
                )
            elif edit == "delete":
                text = text[:at] + text[at + rng.randint(1, 5) :]
            else:
                text = text[:at]
        return text


def _lookup(node, path):
    for step in path:
        node = node[step]
    return node


# Traffic ------------------------------------------------------------------------------------


def valid_traces(rng: random.Random, count: int) -> list[ExportTraceServiceRequest]:
    """Agent traces of three spans (agent root, model call, tool call) with seeded ids."""
    traces = []
    for n in range(count):
        trace_id, root_id = rng.randbytes(15) + b"\x01", rng.randbytes(7) + b"\x01"
        root = span(
            trace_id, "invoke_agent fuzz", span_id=root_id, attributes={**AGENT_ROOT, "session.id": f"s{n % 40}"}
        )
        chat = span(
            trace_id,
            "chat gpt-test",
            parent=root_id,
            span_id=rng.randbytes(7) + b"\x02",
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-test"},
        )
        tool = span(
            trace_id,
            "execute_tool lookup",
            parent=root_id,
            span_id=rng.randbytes(7) + b"\x03",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.arguments": '{"order": 7}',
                "gen_ai.tool.call.result": "shipped",
            },
        )
        traces.append(request_of([root, chat, tool], service="fuzz-agent"))
    return traces


def bad_ids(rng: random.Random, request: ExportTraceServiceRequest, everyone: bool) -> ExportTraceServiceRequest:
    copy = ExportTraceServiceRequest()
    copy.CopyFrom(request)
    spans = [s for rs in copy.resource_spans for ss in rs.scope_spans for s in ss.spans]
    for s in spans if everyone else rng.sample(spans, rng.randint(1, len(spans))):
        field = rng.choice(["trace_id", "span_id", "parent_span_id"])
        bad = rng.choice([b"", b"\x00" * 16, b"\x00" * 8, b"\x01" * 3, b"\x01" * 17, b"\x07" * 1000])
        if field == "parent_span_id" and len(bad) in (0, 8):
            bad = b"\x01" * 3
        setattr(s, field, bad)
    return copy


def malformed_cases(rng: random.Random) -> list[Case]:
    mutator = Mutator(rng)
    protobufs = list(fixture_requests())
    documents = list(fixture_documents())
    fresh = [r for r in valid_traces(random.Random(rng.random()), 64)]  # ids never sent whole
    cases: list[Case] = []

    def gz(data: bytes) -> bytes:
        return gzip.compress(data, compresslevel=rng.choice([1, 6, 9]))

    weights = {
        "http protobuf mutated": 1800,
        "http json mutated": 1800,
        "http wrong content type": 700,
        "http bad content encoding": 300,
        "http corrupt gzip": 1200,
        "http corrupt deflate": 300,
        "http oversized": 150,
        "http gzip bomb": 150,
        "http bad ids": 900,
        "grpc protobuf mutated": 2200,
        "grpc random bytes": 300,
        "grpc bad ids": 500,
        "grpc oversized": 100,
    }
    assert sum(weights.values()) == MALFORMED
    for kind, count in weights.items():
        for _ in range(count):
            if kind == "http protobuf mutated":
                cases.append(
                    Case(
                        kind,
                        "http",
                        mutator.flip(rng.choice(protobufs)),
                        rng.choice([PROTOBUF, "application/protobuf"]),
                    )
                )
            elif kind == "http json mutated":
                line = rng.choice(documents)
                text = (
                    mutator.mutate_text(line)
                    if rng.random() < 0.3
                    else dumps(mutator.mutate_json(json.loads(line)), rng)
                )
                cases.append(Case(kind, "http", text.encode(), JSON))
            elif kind == "http wrong content type":
                cases.append(
                    Case(
                        kind,
                        "http",
                        rng.choice(protobufs),
                        rng.choice(
                            [
                                "text/plain",
                                "application/xml",
                                "application/octet-stream",
                                "multipart/form-data; boundary=x",
                                "application/x-www-form-urlencoded",
                                "application/grpc",
                                "",
                                "application/jsonl",
                                "image/png",
                                "application/x-protobuf-v2",
                            ]
                        ),
                    )
                )
            elif kind == "http bad content encoding":
                cases.append(
                    Case(
                        kind,
                        "http",
                        gz(rng.choice(protobufs)),
                        PROTOBUF,
                        rng.choice(["br", "compress", "zstd", "gzip, br", "x-gzip", "snappy"]),
                    )
                )
            elif kind == "http corrupt gzip":
                body = gz(rng.choice(protobufs))
                body = rng.choice(
                    [
                        body[: rng.randrange(len(body))],
                        mutator.flip(body, rounds=2),
                        rng.randbytes(40),
                        body[:10],
                        b"\x1f\x8b" + rng.randbytes(30),
                    ]
                )
                cases.append(Case(kind, "http", body, rng.choice([PROTOBUF, JSON]), "gzip"))
            elif kind == "http corrupt deflate":
                body = zlib.compress(rng.choice(protobufs))
                body = rng.choice([body[: rng.randrange(len(body))], mutator.flip(body, rounds=2), gz(b"not zlib")])
                cases.append(Case(kind, "http", body, PROTOBUF, "deflate"))
            elif kind == "http oversized":
                cases.append(Case(kind, "http", rng.randbytes(LIMIT + rng.randint(1, LIMIT)), PROTOBUF))
            elif kind == "http gzip bomb":
                cases.append(
                    Case(
                        kind,
                        "http",
                        gzip.compress(b"\x00" * rng.randint(LIMIT + 1, 40 * LIMIT), 9),
                        rng.choice([PROTOBUF, JSON]),
                        "gzip",
                    )
                )
            elif kind == "http bad ids":
                request = bad_ids(rng, rng.choice(fresh), everyone=rng.random() < 0.7)
                if rng.random() < 0.5:
                    cases.append(Case(kind, "http", request.SerializeToString(), PROTOBUF))
                else:
                    cases.append(Case(kind, "http", encode_request(request).encode(), JSON))
            elif kind == "grpc protobuf mutated":
                cases.append(Case(kind, "grpc", mutator.flip(rng.choice(protobufs))))
            elif kind == "grpc random bytes":
                cases.append(Case(kind, "grpc", rng.randbytes(rng.randint(1, 300))))
            elif kind == "grpc bad ids":
                cases.append(
                    Case(kind, "grpc", bad_ids(rng, rng.choice(fresh), everyone=rng.random() < 0.7).SerializeToString())
                )
            elif kind == "grpc oversized":
                cases.append(Case(kind, "grpc", rng.randbytes(LIMIT + rng.randint(1, LIMIT))))
    return cases


def well_formed_cases(rng: random.Random) -> tuple[list[Case], set[tuple[bytes, bytes]], set[bytes]]:
    cases, spans, roots = [], set(), set()
    for request in valid_traces(rng, VALID_TRACES):
        for s in request.resource_spans[0].scope_spans[0].spans:
            spans.add((s.trace_id, s.span_id))
            if not s.parent_span_id:
                roots.add(s.span_id)
        how = rng.choice(["grpc", "http protobuf", "http json", "http gzip"])
        if how == "grpc":
            cases.append(Case("valid", "grpc", request.SerializeToString(), valid=True))
        elif how == "http protobuf":
            cases.append(Case("valid", "http", request.SerializeToString(), PROTOBUF, valid=True))
        elif how == "http json":
            cases.append(Case("valid", "http", encode_request(request).encode(), JSON, valid=True))
        else:
            cases.append(
                Case("valid", "http", gzip.compress(request.SerializeToString()), PROTOBUF, "gzip", valid=True)
            )
    return cases, spans, roots


# Sending ------------------------------------------------------------------------------------


@dataclass
class Answer:
    code: object  # HTTP status (int) or gRPC status name
    response: ExportTraceServiceResponse | None = None


async def send_http(session: aiohttp.ClientSession, url: str, case: Case) -> Answer:
    headers = {}
    if case.content_type:
        headers["Content-Type"] = case.content_type
    if case.encoding:
        headers["Content-Encoding"] = case.encoding
    async with session.post(url, data=case.body, headers=headers) as reply:
        payload = await reply.read()
        response = None
        if reply.status == 200:
            if reply.content_type == JSON:
                response = json_format.Parse(payload, ExportTraceServiceResponse())
            else:
                response = ExportTraceServiceResponse.FromString(payload)
        return Answer(reply.status, response)


async def send_grpc(export, case: Case) -> Answer:
    try:
        payload = await export(case.body, timeout=20)
    except grpc.aio.AioRpcError as error:
        return Answer(error.code().name)
    return Answer("OK", ExportTraceServiceResponse.FromString(payload))


class Spanscore:
    def __init__(self, tmp_path: Path, sink_port: int):
        self.grpc, self.http, self.health = free_port(), free_port(), free_port()
        config = tmp_path / "fuzz.yaml"
        config.write_text(
            CONFIG.format(grpc=self.grpc, http=self.http, health=self.health, sink=sink_port, limit=LIMIT)
        )
        self.stderr_path = tmp_path / "stderr.log"
        self._stderr = open(self.stderr_path, "w")  # a file, not a pipe: ten thousand log lines must not block it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "spanscore", "run", "--config", str(config)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def healthy(self) -> bool:
        return health_check_ok(self.health)

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        finally:
            self._stderr.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._stderr.close()


@pytest.mark.timeout(180)
def test_ten_thousand_malformed_requests_beside_well_formed_traffic(tmp_path, sink):
    rng = random.Random(SEED)
    malformed = malformed_cases(rng)
    valid, valid_spans, valid_roots = well_formed_cases(rng)
    cases = malformed + valid
    rng.shuffle(cases)
    expectations = [case.expected() for case in cases]

    launched = time.monotonic()
    spanscore = Spanscore(tmp_path, sink.grpc_port)
    try:
        assert wait_until(spanscore.healthy, timeout_s=30), spanscore.stderr_path.read_text()[-3000:]
        started = time.monotonic()
        answers = asyncio.run(_send_all(cases, spanscore))
        duration = time.monotonic() - started

        sent = Counter(case.kind for case in cases)
        by_answer = Counter(f"{case.transport} {answer.code}" for case, answer in zip(cases, answers))
        accepted_malformed = Counter(
            case.kind
            for case, answer, expected in zip(cases, answers, expectations)
            if not case.valid and expected.accepted
        )
        print(
            f"\nfuzz run: {len(cases)} requests in {duration:.1f}s ({len(cases) / duration:.0f}/s), "
            f"{len(malformed)} malformed, {len(valid)} well-formed traces; spanscore up in {started - launched:.1f}s"
        )
        print("  sent by kind:", dict(sorted(sent.items())))
        print("  answers:", dict(sorted(by_answer.items(), key=str)))
        print("  malformed but decodable, accepted:", dict(sorted(accepted_malformed.items())))

        wrong = []
        must_arrive = set(valid_spans)
        for case, answer, expected in zip(cases, answers, expectations):
            problem = _check(case, answer, expected)
            if problem:
                wrong.append(
                    f"{case.kind} ({case.content_type!r}, {case.encoding!r}, {len(case.body)} bytes): {problem}"
                )
            elif expected.accepted:
                must_arrive |= expected.spans()
        assert not wrong, f"{len(wrong)} wrong answers, first ones:\n" + "\n".join(wrong[:20])
        assert not any(
            str(code).startswith("5") or code in ("INTERNAL", "UNKNOWN") for code in (answer.code for answer in answers)
        )
        assert len(malformed) >= 10_000 and sum(accepted_malformed.values()) < len(malformed) // 3

        def arrived() -> set[tuple[bytes, bytes]]:
            return {(s.trace_id, s.span_id) for s in sink.spans()}

        assert wait_until(lambda: must_arrive <= arrived(), timeout_s=30), (
            f"{len(must_arrive - arrived())} of {len(must_arrive)} accepted spans missing at the backend"
        )
        print(
            f"  all {len(must_arrive)} accepted spans ({len(valid_spans)} well-formed) at the backend "
            f"{time.monotonic() - started - duration:.1f}s after the last answer"
        )
        roots = [s for s in sink.spans() if s.span_id in valid_roots]
        assert all(any(kv.key == "eval.coherence.score" for kv in root.attributes) for root in roots)
        assert spanscore.process.poll() is None and spanscore.healthy()  # alive at the end
    except BaseException:
        spanscore.kill()
        raise
    stopping = time.monotonic()
    assert spanscore.terminate() == 0
    print(f"  exited 0 on SIGTERM in {time.monotonic() - stopping:.1f}s")
    stderr = spanscore.stderr_path.read_text()
    assert "Traceback" not in stderr, stderr[stderr.index("Traceback") - 500 :][:3000]
    longest = max(stderr.splitlines(), key=len, default="")
    assert len(longest) < MAX_LOG_LINE, longest[:500]
    print(f"  stderr: {len(stderr.splitlines())} lines, longest {len(longest)} characters")


def _check(case: Case, answer: Answer, expected: Expected) -> str | None:
    if answer.code not in expected.allowed:
        return f"answered {answer.code}, expected one of {sorted(expected.allowed, key=str)}"
    if answer.response is not None and expected.accepted:
        rejected = answer.response.partial_success.rejected_spans
        if rejected != expected.rejected_spans:
            return f"partial success says {rejected} spans rejected, {expected.rejected_spans} were invalid"
    if case.valid and answer.code not in (200, "OK"):
        return f"a well-formed request was answered {answer.code}"
    return None


async def _send_all(cases: list[Case], spanscore: Spanscore) -> list[Answer]:
    answers: list[Answer | None] = [None] * len(cases)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(cases)):
        queue.put_nowait(i)
    url = f"http://127.0.0.1:{spanscore.http}/v1/traces"
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout, auto_decompress=True) as session,
        grpc.aio.insecure_channel(
            f"127.0.0.1:{spanscore.grpc}", options=[("grpc.max_send_message_length", 64 * 2**20)]
        ) as channel,
    ):
        export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                case = cases[i]
                if case.transport == "grpc":
                    answers[i] = await send_grpc(export, case)
                else:
                    answers[i] = await send_http(session, url, case)

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CONCURRENCY))), timeout=150)
    return answers  # type: ignore[return-value]
