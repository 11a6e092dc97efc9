"""Ground-truth judge requests read back, and a loopback judge that grades them from markers.

`parts` splits a request into its system prompt, trace data and instructions. `judge`
answers for the `DATASET` below: a subgoal `[needs:X]` is complete once the transcript
holds X; a check passes when the checked value holds "Oslo"; an answer scores 0.9.
"""

from __future__ import annotations

import re

from spanscore.processors.judge_metrics.prompts import TRACE_CLOSE, TRACE_OPEN
from tests.support.judge_answers import schema_of
from tests.support.openai_server import RecordedRequest

TRIAL = re.compile(r"\(independent judgment (\d+)\)\s*$")


def parts(request: RecordedRequest) -> tuple[str, str, str]:
    """(system, data block, instructions) of a judge request."""
    system, user = (m["content"] for m in request.messages())
    data, _, instructions = user.partition(TRACE_CLOSE)
    assert data.startswith(TRACE_OPEN)
    return system, data[len(TRACE_OPEN) :], TRIAL.sub("", instructions).strip()


DATASET = """
cases:
  - id: oslo-trip
    turns:
      - message: What's the weather in Oslo?
        expected_response: Snowing, -3 C
      - message: What should I wear?
    subgoals:
      - details: "[needs:Snowing] Tells the user it is snowing"
      - details: "[needs:wool] Suggests warm clothes"
    expected_tool_calls:
      - tool: get_weather
        turn: 0
        parameters: [{name: city, check: a Norwegian city}]
"""


def judge(request: RecordedRequest):
    name, schema = schema_of(request)
    _, data, instructions = parts(request)
    if name == "subgoals":
        answers = {}
        for key in schema["properties"]:
            details = re.search(rf"^- {key}: (.*)$", instructions, re.MULTILINE).group(1)
            needed = re.search(r"\[needs:(\w+)\]", details).group(1)
            answers[key] = {"explanation": f"looked for {needed}", "complete": needed in data}
        return answers
    if name == "check":
        return {"explanation": "checked", "passed": "Oslo" in data}
    return {"reasoning": "matches the expected answer", "correctness_score": 0.9, "uses_tool_results": True}
