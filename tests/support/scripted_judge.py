"""A judge that answers from a script, for the LLM-judge metrics' tests, and the agent
traces and answers they script it with.

`ScriptedJudge` is an in-process fake of the `Judge` interface (the real client is
tested against a loopback OpenAI server elsewhere): it answers by schema name, checks
each answer against the request's schema as a real client would, and records every
request so tests can read the prompts and count the calls.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from spanscore.processors.agent_trace import AgentTrace, Step, ToolCall, ToolDefinition
from spanscore.processors.judge_metrics.base import Judge, JudgeError, JudgeReply

Answer = Mapping[str, Any] | JudgeError | Callable[["Request"], Any]


@dataclass(frozen=True)
class Request:
    messages: list[dict[str, str]]
    schema: dict[str, Any]
    schema_name: str

    @property
    def system(self) -> str:
        return self.messages[0]["content"]

    @property
    def user(self) -> str:
        return self.messages[-1]["content"]


class ScriptedJudge(Judge):
    """Answers each request from `script[schema_name]`.

    A script entry is an answer (dict), a JudgeError to raise, a list of those (one per
    successive request with that schema name), or a function of the request. Answers
    are validated against the request's schema unless `validate=False`.
    """

    model = "scripted"

    def __init__(self, script: Mapping[str, Any], *, validate: bool = True):
        self.script = dict(script)
        self.validate = validate
        self.requests: list[Request] = []

    def calls(self, schema_name: str | None = None) -> list[Request]:
        return [r for r in self.requests if schema_name is None or r.schema_name == schema_name]

    async def complete(self, messages, schema, schema_name) -> JudgeReply:
        request = Request(copy.deepcopy(messages), schema, schema_name)
        index = len(self.calls(schema_name))
        self.requests.append(request)
        if schema_name not in self.script:
            raise AssertionError(f"unexpected judge call {schema_name!r}")
        entry = self.script[schema_name]
        if isinstance(entry, list):
            entry = entry[index]
        if callable(entry):
            entry = entry(request)
        if isinstance(entry, JudgeError):
            raise entry
        if self.validate:
            jsonschema.validate(entry, schema)
        prompt_chars = sum(len(m["content"]) for m in messages)
        return JudgeReply(data=copy.deepcopy(entry), input_tokens=prompt_chars // 4, output_tokens=10, calls=1)


def tool_step(name: str, arguments: Any, result: str | None = None, error: str | None = None, span: str = "b1") -> Step:
    return Step(kind="tool", name=name, span_id=span, arguments=arguments, result=result, error=error)


def llm_step(
    result: str | None = None, reasoning: list[str] | None = None, tool_calls: list[str] = (), span: str = "a1"
) -> Step:
    return Step(
        kind="llm",
        name="chat gpt-test",
        model="gpt-test",
        span_id=span,
        result=result,
        reasoning=reasoning or [],
        tool_calls=[ToolCall(name=n) for n in tool_calls],
    )


def flight_trace(**changes: Any) -> AgentTrace:
    """An agent that plans, searches flights twice and books one: three tool calls."""
    fields: dict[str, Any] = {
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "agent_name": "travel_agent",
        "user_input": "Find flights from SFO to JFK under $500 and book the cheapest.",
        "final_output": "Booked flight UA 15 for $420, confirmation ABC123.",
        "steps": [
            llm_step(
                reasoning=["Plan: 1. search flights 2. pick the cheapest 3. book it"],
                tool_calls=["flight_search"],
                span="a1",
            ),
            tool_step(
                "flight_search",
                {"origin": "SFO", "destination": "JFK", "max_price": 1000},
                result='[{"flight": "UA 15", "price": 420}]',
                span="b1",
            ),
            tool_step(
                "flight_search",
                {"origin": "SFO", "destination": "JFK", "max_price": 500},
                result='[{"flight": "UA 15", "price": 420}]',
                span="b2",
            ),
            tool_step("book_flight", {"flight": "UA 15"}, result="confirmation ABC123", span="b3"),
            llm_step(result="Booked flight UA 15 for $420, confirmation ABC123.", span="a2"),
        ],
        "available_tools": [
            ToolDefinition(name="flight_search", description="Search flights"),
            ToolDefinition(name="book_flight", description="Book a flight"),
            ToolDefinition(name="weather_lookup", description="Get weather forecast"),
        ],
    }
    fields.update(changes)
    return AgentTrace(**fields)


EXTRACTED = {
    "task": "Find a flight from SFO to JFK under $500 and book the cheapest one",
    "outcome": "Searched flights twice, booked UA 15 for $420, confirmation ABC123",
    "plan": ["search flights", "pick the cheapest", "book it"],
}


def scale(score: float, reason: str, key: str = "score") -> dict[str, Any]:
    return {key: score, "reason": reason}


def arguments_answer(*verdicts: str, reason: str = "One search used the wrong price limit.") -> dict[str, Any]:
    return {
        "verdicts": [{"verdict": v, "reason": "" if v == "yes" else "max_price was 1000, not 500"} for v in verdicts],
        "reason": reason,
    }


# One answer per metric, for scripts that do not care about the numbers.
PER_METRIC_ANSWERS: dict[str, dict[str, Any]] = {
    "task_completion": scale(0.9, "Booked the cheapest flight under $500.", key="verdict"),
    "tool_correctness": scale(0.8, "Right tools; flight_search called twice."),
    "argument_correctness": arguments_answer("no", "yes", "yes"),
    "step_efficiency": scale(0.6, "One redundant search."),
    "confidence": scale(0.7, "Retried the search once.", key="confidence"),
    "plan_adherence": scale(1.0, "Followed the plan in order."),
    "plan_quality": scale(0.75, "Good plan, no price check step."),
}


def full_script(extracted: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per-metric and combined answers, and an extraction answer for any field subset."""
    extracted = dict(EXTRACTED if extracted is None else extracted)

    def extract(request: Request) -> dict[str, Any]:
        return {name: extracted[name] for name in request.schema["properties"]}

    def arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
        # "no" for the first call, "yes" for the rest, as many as the schema asks for.
        n = schema["properties"]["verdicts"]["minItems"]
        return arguments_answer(*(["no"] + ["yes"] * (n - 1))[:n])

    def combined(request: Request) -> dict[str, Any]:
        return {
            name: arguments(schema) if name == "argument_correctness" else PER_METRIC_ANSWERS[name]
            for name, schema in request.schema["properties"].items()
        }

    return {
        **PER_METRIC_ANSWERS,
        "extract": extract,
        "combined": combined,
        "argument_correctness": lambda request: arguments(request.schema),
    }
