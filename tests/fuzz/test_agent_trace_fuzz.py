"""The agent-trace normalizer, fuzzed with every convention's keys and any values.

`build_agent_trace` promises an `AgentTrace` whatever the spans hold. It keeps that
promise for its own bugs by catching everything and logging "could not normalize" (the
trace then loses its input, output and steps for every metric), so the property checked
here is stronger: the fallback is never taken. The spans carry keys of the OTel GenAI
(current and legacy), OpenInference, OpenLLMetry, Langfuse and Vercel AI conventions
(retrieval keys and vector-store result events among them),
with values of every AnyValue kind: JSON strings of any shape (message lists with odd
roles, parts and tool calls among them), nested arrays and maps, huge strings, and
parent links that form cycles.
"""

from __future__ import annotations

import json
import logging
import time
import traceback

from hypothesis import event, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import AgentTrace, agent_trace_of, build_agent_trace
from spanscore.processors.agent_trace.build import read_span_views, summarize
from tests.support.fuzz_strategies import SPAN_IDS, json_values

# Keys each adapter reads (processors/agent_trace/*.py), and prefixes under which it
# reads flattened or nested keys ("gen_ai.prompt.0.content", "llm.input_messages.0...").
KEYS = (
    "gen_ai.operation.name",
    "gen_ai.agent.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.description",
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.usage.input_tokens",
    "gen_ai.response.finish_reasons",
    "gen_ai.conversation.id",
    "gen_ai.user.id",
    "gen_ai.event.content",
    "openinference.span.kind",
    "input.value",
    "output.value",
    "input.mime_type",
    "tool.name",
    "tool.id",
    "tool_call.id",
    "tool.description",
    "tool.parameters",
    "agent.name",
    "graph.node.id",
    "llm.model_name",
    "llm.token_count.prompt",
    "llm.finish_reason",
    "llm.request.type",
    "traceloop.span.kind",
    "traceloop.entity.name",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "traceloop.association.properties.user_id",
    "traceloop.association.properties.session_id",
    "langfuse.observation.type",
    "langfuse.trace.name",
    "langfuse.trace.input",
    "langfuse.trace.output",
    "langfuse.user.id",
    "langfuse.observation.model.name",
    "langfuse.observation.level",
    "langfuse.observation.status_message",
    "langfuse.observation.input",
    "langfuse.observation.output",
    "langfuse.session.id",
    "ai.prompt",
    "ai.prompt.messages",
    "ai.prompt.tools",
    "ai.response.text",
    "ai.response.toolCalls",
    "ai.response.model",
    "ai.model.id",
    "ai.usage.promptTokens",
    "ai.response.finishReason",
    "ai.operationId",
    "user.id",
    "enduser.id",
    "session.id",
    "error.type",
    "gen_ai.retrieval.query.text",
    "gen_ai.retrieval.documents",
    "reranker.query",
    "reranker.model_name",
    "db.system",
    "db.operation",
)
INDEXED_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.tools.",
    "llm.request.functions.",
    "ai.prompt.",
    "langfuse.",
    "traceloop.",
    "gen_ai.",
    "openinference.",
    "retrieval.documents.",
    "reranker.output_documents.",
)
SUFFIXES = (
    "role",
    "content",
    "message.role",
    "message.content",
    "tool_calls.0.function.name",
    "message.tool_calls.0.tool_call.function.arguments",
    "tool.json_schema",
    "name",
    "arguments",
    "contents.0.message_content.text",
    "finish_reason",
    "tool_call_id",
    "document.id",
    "document.content",
    "document.score",
    "document.metadata",
    "0",
    "",
)
# The values the adapters switch on.
KINDS = (
    "LLM",
    "TOOL",
    "AGENT",
    "CHAIN",
    "RETRIEVER",
    "RERANKER",
    "retrieval",
    "retriever",
    "chroma",
    "query",
    "EVALUATOR",
    "llm",
    "tool",
    "agent",
    "workflow",
    "task",
    "invoke_agent",
    "chat",
    "execute_tool",
    "create_agent",
    "text_completion",
    "GENERATION",
    "SPAN",
    "EVENT",
    "ai.generateText",
    "ai.streamText.doStream",
    "ai.toolCall",
    "completion",
    "",
)
ROLES = ("user", "assistant", "system", "tool", "developer", "model", "function", "", None, 7)

flat_key = st.builds(
    lambda p, i, s: f"{p}{i}.{s}".rstrip("."),
    st.sampled_from(INDEXED_PREFIXES),
    st.integers(0, 3),
    st.sampled_from(SUFFIXES),
)
keys = st.one_of(
    st.sampled_from(KEYS), flat_key, st.sampled_from(INDEXED_PREFIXES).map(lambda p: p + "x"), st.text(max_size=12)
)

# Message-shaped JSON: the shapes the conventions write, with the wrong types in places.
scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
small = json_values(max_leaves=3)
part = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "tool_call", "tool_call_response", "reasoning", "thinking", "image", 3]),
        "content": small,
        "text": scalar,
        "id": scalar,
        "name": scalar,
        "arguments": small,
        "response": scalar,
    },
)
tool_call = st.fixed_dictionaries(
    {},
    optional={
        "id": scalar,
        "type": st.sampled_from(["function", 1]),
        "name": scalar,
        "arguments": small,
        "function": st.fixed_dictionaries({}, optional={"name": scalar, "arguments": small}),
    },
)
message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(ROLES),
        "content": st.one_of(small, st.lists(part, max_size=2)),
        "parts": st.one_of(st.lists(part, max_size=3), scalar),
        "tool_calls": st.one_of(st.lists(tool_call, max_size=2), scalar),
        "tool_call_id": scalar,
        "name": scalar,
        "finish_reason": scalar,
    },
)
messages_json = st.one_of(
    st.lists(message, max_size=3),
    message,
    st.fixed_dictionaries({"messages": st.lists(message, max_size=2)}),
    json_values(6),
).map(json.dumps)

# A huge text, plain or the body of a JSON message (a pasted document, a base64 image).
huge = st.sampled_from(
    [
        "x" * 300_000,
        "{" * 50_000,
        '[{"role":"user","content":"' + "a" * 300_000 + '"}]',
        json.dumps([{"role": "user", "parts": [{"type": "text", "content": "é" * 200_000}]}]),
        "Agent(" * 20_000 + ")" * 20_000,
        json.dumps({"messages": [{"role": "user", "content": "q"}] * 5_000}),
    ]
)


def _any_value(children: st.SearchStrategy[AnyValue]) -> st.SearchStrategy[AnyValue]:
    return st.one_of(
        st.builds(lambda vs: AnyValue(array_value=ArrayValue(values=vs)), st.lists(children, max_size=3)),
        st.builds(
            lambda kvs: AnyValue(kvlist_value=KeyValueList(values=kvs)),
            st.lists(st.builds(KeyValue, key=keys, value=children), max_size=3),
        ),
    )


values = st.recursive(
    st.one_of(
        st.builds(AnyValue, string_value=st.one_of(messages_json, st.sampled_from(KINDS), st.text(max_size=30))),
        st.builds(AnyValue, int_value=st.integers(-(2**63), 2**63 - 1)),
        st.builds(AnyValue, double_value=st.floats()),
        st.builds(AnyValue, bool_value=st.booleans()),
        st.builds(AnyValue, bytes_value=st.binary(max_size=10)),
        st.just(AnyValue()),
    ),
    _any_value,
    max_leaves=6,
)
attributes = st.lists(st.builds(KeyValue, key=keys, value=values), max_size=6)
events = st.lists(
    st.builds(
        Span.Event,
        name=st.one_of(
            st.sampled_from(
                [
                    "gen_ai.client.inference.operation.details",
                    "gen_ai.user.message",
                    "gen_ai.assistant.message",
                    "gen_ai.system.message",
                    "gen_ai.tool.message",
                    "gen_ai.choice",
                    "gen_ai.content.prompt",
                    "gen_ai.content.completion",
                    "exception",
                    "db.query.result",
                    "db.search.result",
                ]
            ),
            st.text(max_size=10),
        ),
        attributes=attributes,
    ),
    max_size=3,
)


@st.composite
def traces(draw) -> tuple[bytes, list[Span]]:
    trace_id = b"\x5a" * 16
    count = draw(st.integers(1, 5))
    ids = [draw(SPAN_IDS) for _ in range(count)]
    spans = []
    for span_id in ids:
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=span_id,
                # a parent in the trace (itself and cycles included), elsewhere, or none
                parent_span_id=draw(st.one_of(st.just(b""), st.sampled_from(ids), st.binary(min_size=8, max_size=8))),
                name=draw(st.one_of(st.sampled_from(KINDS), st.text(max_size=15))),
                kind=draw(st.integers(0, 5)),
                start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                attributes=draw(attributes),
                events=draw(events),
                status=Status(code=draw(st.integers(0, 2)), message=draw(st.text(max_size=10))),
            )
        )
    return trace_id, spans


class Fallbacks(logging.Handler):
    """The normalizer's own failures: the builder's fallback and its adapters' skips."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.fallbacks: list[str] = []
        self.skips: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            cause = "".join(traceback.format_exception(*record.exc_info))[-2000:] if record.exc_info else ""
            self.fallbacks.append(f"{message[:500]}\n{cause}")
        elif "adapter skipped" in message:
            self.skips.append(message[:300])


def normalize(trace_id: bytes, spans: list[Span], resource: Resource | None = None) -> AgentTrace:
    watcher = Fallbacks()
    logger = logging.getLogger("spanscore.processors.agent_trace")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(watcher)
    try:
        agent = build_agent_trace(trace_id, [(s, resource or Resource()) for s in spans], session_id="s-1")
        summary = summarize(read_span_views(trace_id, [(s, resource or Resource()) for s in spans]))
    finally:
        logger.removeHandler(watcher)
        logger.setLevel(level)
    assert not watcher.fallbacks, watcher.fallbacks
    assert not watcher.skips, watcher.skips
    assert isinstance(agent, AgentTrace)
    assert agent.trace_id == trace_id.hex() and agent.session_id == "s-1"
    assert isinstance(agent.user_input, str) and isinstance(agent.final_output, str)
    span_ids = {s.span_id.hex() for s in spans}
    assert all(step.kind in ("llm", "tool") and step.span_id in span_ids for step in agent.steps)
    # What the scope and the embedding metrics read instead of the full view.
    assert (summary.user_input, summary.final_output, summary.agent_name, summary.recognized) == (
        agent.user_input,
        agent.final_output,
        agent.agent_name,
        agent.recognized,
    )
    event("recognized" if agent.recognized else "not recognized")
    if agent.steps:
        event("has steps")
    return agent


@settings(max_examples=200, deadline=None)
@given(traces())
def test_any_attributes_under_every_convention_normalize_without_falling_back(trace):
    trace_id, spans = trace
    normalize(trace_id, spans)


@settings(max_examples=30, deadline=None)
@given(traces(), huge, st.sampled_from(KEYS))
def test_huge_values_normalize_without_falling_back_in_bounded_time(trace, text, key):
    trace_id, spans = trace
    spans[0].attributes.add(key=key, value=AnyValue(string_value=text))
    spans[-1].attributes.add(key="gen_ai.input.messages", value=AnyValue(string_value=text))
    started = time.monotonic()
    normalize(trace_id, spans)
    assert time.monotonic() - started < 5.0


@settings(max_examples=40, deadline=None)
@given(traces())
def test_assembled_traces_normalize_as_processors_see_them(trace):
    trace_id, spans = trace
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])
    assembler = Assembler(PipelineSettings())
    outcome = assembler.add(request, now=0.0)
    [assembled] = assembler.pop_all()
    assert assembled.span_count == outcome.accepted
    agent = agent_trace_of(assembled)
    assert agent is agent_trace_of(assembled)  # built once, shared by the processors
    assert agent.trace_id == trace_id.hex()
