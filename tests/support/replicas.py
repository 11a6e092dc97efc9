"""`spanscore run` replicas scoring seeded agent sessions into files, as the scale-out
test runs them: the replica's config, the sessions sent with the OpenTelemetry SDK, and
the scores read back from the files."""

from __future__ import annotations

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

from tests.support.ports import free_port
from tests.support.processes import ROOT
from tests.support.running import health_check_ok

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


class Replica:
    def __init__(self, tmp_path: Path, name: str):
        self.grpc, health = free_port(), free_port()
        self.output = tmp_path / f"{name}.jsonl"
        config = tmp_path / f"{name}.yaml"
        config.write_text(CONFIG.format(grpc=self.grpc, health=health, output=self.output))
        self.health = health
        self.start(config)

    def start(self, config: Path) -> None:
        """`spanscore run` with `config`, its log kept for `stop`."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "spanscore", "run", "--config", str(config)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

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
    provider = TracerProvider(
        resource=Resource.create({"service.name": "support-agent"}), id_generator=SeededIds(",".join(sessions))
    )
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True)))
    tracer = provider.get_tracer("scale-out")
    for session_id in sessions:
        n = session_id.rsplit("-", 1)[1]
        for question, answer in zip(QUESTIONS, ANSWERS):
            with tracer.start_as_current_span("invoke_agent support") as root:
                root.set_attributes(
                    {
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "support",
                        "session.id": session_id,
                        "gen_ai.input.messages": json.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": question.format(n=n)}]}]
                        ),
                        "gen_ai.output.messages": json.dumps(
                            [{"role": "assistant", "parts": [{"type": "text", "content": answer.format(n=n)}]}]
                        ),
                    }
                )
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
