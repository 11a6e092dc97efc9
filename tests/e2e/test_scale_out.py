"""Scale-out: sessions split by session id over N spanscore processes score as one.

In front of N replicas, the Collector's `loadbalancing` exporter with
`routing_key: attributes` and `routing_attributes: [session.id]` sends every span of a
session to the same replica (deploy/loadbalancing). This is the property that relies
on: here a consistent hash of the session id splits 12 sessions of agent traces over 3
`spanscore run` processes, each sent with the OpenTelemetry SDK's OTLP exporter, and the
per-trace and per-session scores are the same as one process's on all the traffic.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator

from tests.exporters.test_score_metrics import free_port
from tests.support.running import health_check_ok, wait_until

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = 3
SESSIONS = 12

CONFIG = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{grpc}'}}}}}}}}
processors:
  assembler: {{trace_wait: 100ms, session_idle: 5m}}
  embedding_metrics: {{embedder: {{type: hashing}}}}
  session_metrics: {{}}
exporters: {{file: {{path: '{output}'}}}}
extensions: {{health_check: {{endpoint: '127.0.0.1:{health}'}}}}
service:
  extensions: [health_check]
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, embedding_metrics, session_metrics], exporters: [file]}}
"""

QUESTIONS = ["Where is my parcel {n}?", "Can you check again?", "And my refund for order {n}?"]
ANSWERS = ["Parcel {n} left the depot.", "Parcel {n} left the depot.", "Refund {n} was issued today."]


def replica_of(session_id: str, replicas: int) -> int:
    """Rendezvous hashing: the replica with the highest hash of (replica, session id)."""
    return max(range(replicas), key=lambda r: hashlib.sha256(f"{r}/{session_id}".encode()).digest())


class Replica:
    def __init__(self, tmp_path: Path, name: str):
        self.grpc, health = free_port(), free_port()
        self.output = tmp_path / f"{name}.jsonl"
        config = tmp_path / f"{name}.yaml"
        config.write_text(CONFIG.format(grpc=self.grpc, health=health, output=self.output))
        self.process = subprocess.Popen([sys.executable, "-m", "spanscore", "run", "--config", str(config)], cwd=ROOT,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.health = health

    def healthy(self) -> bool:
        return health_check_ok(self.health)

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)  # closes the open sessions: their carriers are written
        _, stderr = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, stderr
        return stderr


class SeededIds(IdGenerator):
    """The same trace and span ids on every run of the same traffic, so the split run and
    the single run can be compared trace by trace."""

    def __init__(self, seed: str):
        self._random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


def send_sessions(sessions: list[str], port: int) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}),
                              id_generator=SeededIds(",".join(sessions)))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True)))
    tracer = provider.get_tracer("scale-out")
    for session_id in sessions:
        n = session_id.rsplit("-", 1)[1]
        for question, answer in zip(QUESTIONS, ANSWERS):
            with tracer.start_as_current_span("invoke_agent support") as root:
                root.set_attributes({
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support", "session.id": session_id,
                    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                        {"type": "text", "content": question.format(n=n)}]}]),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                        {"type": "text", "content": answer.format(n=n)}]}])})
                with tracer.start_as_current_span("chat"):
                    pass
    provider.shutdown()


def scores(paths: list[Path]) -> tuple[dict, dict]:
    """eval.* score and label attributes of each scored root span by trace id, and of
    each session carrier by session id."""
    by_trace, by_session = {}, {}
    for path in paths:
        for line in path.read_text().splitlines():
            for resource_spans in json.loads(line)["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    for span in scope_spans["spans"]:
                        attributes = {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}
                        found = {k: v for k, v in attributes.items() if k.endswith((".score", ".label"))}
                        if span["name"] == "evaluate_session":
                            by_session[attributes["session.id"]] = found
                        elif found:
                            by_trace[span["traceId"]] = found
    return by_trace, by_session


def test_sessions_split_by_id_over_three_processes_score_as_one(tmp_path):
    sessions = [f"session-{n}" for n in range(SESSIONS)]
    replicas = [Replica(tmp_path, f"replica-{i}") for i in range(REPLICAS)] + [Replica(tmp_path, "single")]
    try:
        assert wait_until(lambda: all(r.healthy() for r in replicas), timeout_s=30), "spanscore did not come up"
        shards = [[s for s in sessions if replica_of(s, REPLICAS) == i] for i in range(REPLICAS)]
        assert all(shards), shards  # every replica gets some sessions
        for shard, replica in zip(shards, replicas):
            send_sessions(shard, replica.grpc)
        # The single process gets the same traffic, shard by shard: the same spans and ids.
        for shard in shards:
            send_sessions(shard, replicas[-1].grpc)
    finally:
        for replica in replicas:
            if replica.process.poll() is None:
                replica.stop()
    split_traces, split_sessions = scores([r.output for r in replicas[:-1]])
    single_traces, single_sessions = scores([replicas[-1].output])
    assert len(single_sessions) == SESSIONS and len(single_traces) == SESSIONS * len(QUESTIONS)
    assert split_sessions == single_sessions
    assert split_traces == single_traces
    # A loop is caught only when a session's turns meet on one replica: turn 2 repeats turn 1.
    assert sum(found["eval.loop_detection.label"] == "fail" for found in split_traces.values()) == SESSIONS
