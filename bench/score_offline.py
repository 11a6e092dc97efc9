"""Offline scoring speed: `spanscore score` over agent-like spans, in spans/s.

    python bench/score_offline.py [--requests 40] [--config otel-config.yaml]

Writes `--requests` OTLP/JSON lines of 512 agent-like spans each (bench.agent_spans: 8
spans per trace, 4 traces per session, texts varying per trace) to a temporary file and
scores it with the config's processors (default: the project's otel-config.yaml, whose
LLM-judge metrics stay off without OPENAI_API_KEY), as `spanscore score` does, reporting
spans/s end to end (reading, scoring, writing) and per metric what was scored. One run
on this machine; both cores are free for it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from bench.agent_spans import AgentRequests  # noqa: E402
from spanscore.config.loader import load_config  # noqa: E402
from spanscore.core.otlp_json import encode_request  # noqa: E402
from spanscore.offline.score_files import score_files, summary_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--config", default=str(ROOT / "otel-config.yaml"))
    args = parser.parse_args()
    os.environ.pop("OPENAI_API_KEY", None)
    config = load_config(args.config)
    generator = AgentRequests(seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        source, output = Path(tmp) / "recorded.jsonl", Path(tmp) / "scored.jsonl"
        with source.open("w") as f:
            for _ in range(args.requests):
                f.write(encode_request(ExportTraceServiceRequest.FromString(generator.make()[0])) + "\n")
        summary = asyncio.run(score_files([source], config, output))
        print(f"{args.config}: processors {', '.join(c.id for c in config.processors)}")
        print(summary_table(summary, output))


if __name__ == "__main__":
    main()
