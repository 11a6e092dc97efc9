"""An agent run whose tool call failed: a model call, a tool call with an HTTP call under
it (429 when failing), a model call. What failure_localization blames, by span id."""

from __future__ import annotations

import json

from tests.support.agent_spans import make_span
from tests.support.spans import new_span_id, new_trace_id

ROOT = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "support-bot",
    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Where is it?"}]}]),
    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Soon."}]}]),
}


def run_spans(failing: bool):
    """(trace id, {"root": id, "http": id}, spans): the HTTP call answers 429 when failing."""
    trace_id = new_trace_id()
    root, chat, tool, http, answer = (new_span_id() for _ in range(5))
    tool_error = "ToolError: upstream said 429 Too Many Requests" if failing else None
    spans = [
        make_span("invoke_agent support-bot", ROOT, id=root, start=1_000, end=9_000, trace_id=trace_id),
        make_span("chat m", {"gen_ai.operation.name": "chat"}, id=chat, parent=root, start=2_000, trace_id=trace_id),
        make_span(
            "execute_tool track",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "track", "gen_ai.tool.call.arguments": "{}"},
            id=tool,
            parent=root,
            start=3_000,
            end=5_000,
            error=tool_error,
            trace_id=trace_id,
        ),
        make_span(
            "GET",
            {"http.response.status_code": 429 if failing else 200},
            id=http,
            parent=tool,
            start=3_500,
            trace_id=trace_id,
        ),
        make_span("chat m", {"gen_ai.operation.name": "chat"}, id=answer, parent=root, start=6_000, trace_id=trace_id),
    ]
    return trace_id, {"root": root, "http": http}, spans
