"""A loopback judge for failure_localization: answers from what each request shows.

It reads the steps a request shows (`[n] span <id> · ...` blocks) and blames each step
whose text holds `marker` (case-insensitive) as `category`; asked which half holds the
first error, it names the half with the first marked step, or none. It reads no meaning:
its answers test the plumbing (windows, bisection, caps, span ids), never a judgment.
"""

from __future__ import annotations

import json
import re

from spanscore.processors.judge_metrics.prompts import prompt_tokens
from spanscore.processors.judge_metrics.token_estimate import estimate_tokens
from tests.support.judge_answers import schema_of
from tests.support.openai_server import RecordedRequest, Reply

_STEP = re.compile(r"^\[(\d+)\] span ([0-9a-f]{16}) · ", re.MULTILINE)
_HALVES = re.compile(r"^Later half, steps (\d+) to", re.MULTILINE)


def shown_steps(text: str) -> list[tuple[int, str, str]]:
    """(number, span id, the step's text) for each step block in `text`."""
    found = list(_STEP.finditer(text))
    blocks = []
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        blocks.append((int(match.group(1)), match.group(2), text[match.start() : end]))
    return blocks


def localization_judge(marker: str = "wrong", category: str = "tool_output_misinterpretation"):
    def handler(request: RecordedRequest) -> Reply:
        name, schema = schema_of(request)
        text = request.messages()[-1]["content"]
        data_part = text.split("<trace_data>", 1)[-1]
        steps = shown_steps(data_part)
        marked = [number for number, _, block in steps if marker.lower() in block.lower()]
        if name == "failure_localization_half":
            later = _HALVES.search(text)
            if not marked:
                answer = {"first_error_in": "none", "reason": "no marked step"}
            else:
                in_later = later is not None and marked[0] >= int(later.group(1))
                answer = {"first_error_in": "later" if in_later else "earlier", "reason": f"step {marked[0]}"}
        else:
            numbers = [number for number, _, _ in steps]
            answer = {
                "errors": [
                    {
                        "step": number,
                        "category": category,
                        "impact": "medium",
                        "evidence": marker,
                        "explanation": f"step {number} holds {marker!r}",
                    }
                    for number in marked
                ],
                "summary": f"read steps {min(numbers)} to {max(numbers)}" if numbers else "read nothing",
            }
        content = json.dumps(answer)
        # Usage as spanscore estimates tokens (UTF-8 bytes / 3), so costs read in one unit.
        return Reply(
            content=content,
            prompt_tokens=prompt_tokens(request.messages(), schema),
            completion_tokens=estimate_tokens(content),
        )

    return handler
