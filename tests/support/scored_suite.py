"""A small eval suite scored for real: one-trace weather attempts graded by `ground_truth`
against a two-case dataset (no judge needed: the expected calls are exact values)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from spanscore.config.loader import parse_config
from spanscore.core.otlp_json import encode_request
from spanscore.offline.score_files import score_files
from tests.support.factories import TEST_FACTORIES
from tests.support.spans import new_span_id, new_trace_id, request_of, span

DATASET = """
cases:
  - id: oslo
    user_instruction: Weather in Oslo
    expected_tool_calls: [{tool: get_weather, parameters: [{name: city, value: Oslo}]}]
  - id: paris
    user_instruction: Weather in Paris
    expected_tool_calls: [{tool: get_weather, parameters: [{name: city, value: Paris}]}]
"""


def attempt_root(trace_id: bytes, root: bytes, city: str):
    """An attempt's root span: the user asks for the weather, the agent answers for `city`."""
    return span(
        trace_id,
        "invoke_agent weather",
        span_id=root,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "weather?"}]}]',
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": f"It is -3 C in {city}."}]}]
            ),
        },
    )


def attempt(case_id: str, city: str, extra: str | None = None, resource: dict | None = None):
    """One attempt: the agent asks for `city`'s weather (and calls `extra` too), and answers
    with the report's temperature."""
    trace_id, root = new_trace_id(), new_span_id()
    spans = [attempt_root(trace_id, root, city)]
    for tool, arguments in (("get_weather", f'{{"city": "{city}"}}'), (extra, "{}")):
        if tool:
            spans.append(
                span(
                    trace_id,
                    f"execute_tool {tool}",
                    parent=root,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool,
                        "gen_ai.tool.call.arguments": arguments,
                        "gen_ai.tool.call.result": "Snowing, -3 C",
                    },
                )
            )
    return request_of(spans, resource_attributes={"eval.case.id": case_id, **(resource or {})})


def score_suite(tmp_path: Path, requests: Iterable, cases: str = DATASET) -> tuple[Path, Path]:
    """Write `requests`, grade them with `ground_truth` against `cases`; (scored file, dataset)."""
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(cases)
    recorded = tmp_path / "recorded.jsonl"
    recorded.write_text("".join(encode_request(r) + "\n" for r in requests))
    config = parse_config(
        f"""
receivers: {{otlp: {{}}}}
processors: {{ground_truth: {{dataset: {dataset}}}}}
exporters: {{debug: {{}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: [assembler, ground_truth], exporters: [debug]}}}}}}
""",
        factories=TEST_FACTORIES,
    )
    out = tmp_path / "scored.jsonl"
    summary = asyncio.run(score_files([recorded], config, out))
    assert summary.problems == []
    return out, dataset


def recipe(successes: float, total: int, statistic=lambda p: p) -> tuple[float, float]:
    """The Bayesian interval of docs/eval-suites.md, computed here the way it is written there."""
    rng = np.random.default_rng(42)
    samples = statistic(rng.beta(1 + successes, 1 + total - successes, size=5000))
    low, high = np.quantile(samples, [0.025, 0.975])
    return float(low), float(high)
