"""Assembling an AgentTrace from the spans of one trace.

Each span is read by every convention adapter that recognises it, most specific first
(Langfuse, OpenInference, OpenLLMetry, the Vercel AI SDK, then OTel GenAI, whose
attributes the others also emit), into a `SpanView`; an adapter is not even asked about
a span that has no key under its prefixes. The views are then combined:

- user input: a trace-level input (Langfuse), else the input of the outermost
  agent/chain span that holds the user's request (out of any framework envelope; see
  `envelopes`: a framework's state object or a Python repr is not one), else the
  latest user message of the first LLM call (the latest rather than the first, so a
  multi-turn conversation replayed into the first call yields this turn's request);
- final output: a trace-level output, else the outermost agent/chain output that holds
  an answer, else the text of the last LLM call that produced text;
- tool steps come from tool spans, without the tools a framework uses to end a run
  (`INTERNAL_TOOLS`); a tool call requested by an LLM with no span of its own becomes a
  step whose result is the matching tool message (by tool_call_id) of a later LLM call,
  and a tool span that did not record its arguments takes the call's;
- an LLM span nested inside another LLM span is the same call seen twice: the outer one
  is kept when it has the prompt and the answer (the Agents SDK response span around an
  instrumented client call), else the inner ones that have the answer (LlamaIndex's
  wrapper spans, its `predict` holding only a template and the answer); LLM spans
  with no content and no sign of a completed call are dropped when others have some;
- retrieval steps come from retriever, reranker and vector-store query spans (see
  `retrieval` for their bounds); one inside another retrieval span that has documents
  is the same retrieval seen twice (a framework's retriever around the store's query),
  and only the outer one is kept. Retrieval steps alone do not make a trace an agent
  run (`AgentTrace.recognized`): a lone vector-store query is not scored.

A span an adapter cannot read contributes nothing from that adapter; it never fails the
trace.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.processors.agent_trace import genai, langfuse, openinference, openllmetry, vercel_ai
from spanscore.processors.agent_trace.attributes import KeyShape
from spanscore.processors.agent_trace.content import (
    block_text,
    io_text,
    last_user_text,
    normalize_messages,
    parse_arguments,
    parse_json,
)
from spanscore.processors.agent_trace.envelopes import input_text, output_text, unwrap
from spanscore.processors.agent_trace.model import (
    AgentTrace,
    Message,
    Step,
    ToolCall,
    ToolDefinition,
    new_agent_trace,
    new_step,
)
from spanscore.processors.agent_trace.spans import AGENT, CHAIN, LLM, RETRIEVAL, TOOL, SpanView

logger = logging.getLogger(__name__)

Adapter = Callable[[SpanView], bool]

ADAPTERS: tuple[tuple[str, Adapter], ...] = (
    ("langfuse", langfuse.apply),
    ("openinference", openinference.apply),
    ("openllmetry", openllmetry.apply),
    ("vercel_ai", vercel_ai.apply),
    ("genai", genai.apply),
)

USER_ID_KEYS = ("user.id", "enduser.id", "gen_ai.user.id")

# Tools a framework calls to end a run, not tools of the agent: smolagents' final_answer.
INTERNAL_TOOLS = frozenset({"final_answer"})

# `weather_agent.run`, `weather_agent._execute_core`: an agent span named for the method.
_METHOD_SUFFIX = re.compile(r"^([A-Za-z_][\w-]*)\.[A-Za-z_]\w*$")

# Adapters that read nothing from a span without a key under their prefixes: each key
# shape is asked once which of them apply (most spans carry only GenAI keys).
_KEY_PREFIXES = {
    "langfuse": langfuse.KEY_PREFIXES,
    "openinference": openinference.KEY_PREFIXES,
    "openllmetry": openllmetry.KEY_PREFIXES,
    "vercel_ai": vercel_ai.KEY_PREFIXES,
}

_START_DEPTH = attrgetter("start", "depth")
_DEPTH_START = attrgetter("depth", "start")


@dataclass(frozen=True)
class AgentSummary:
    """The trace-level fields of the normalized view, without its steps and tools.

    Equal to the same fields of `build_agent_trace`'s `AgentTrace` (a test holds them to
    that on every fixture), at a fraction of the cost: what the scoring scope, the
    embedding metrics and the score metrics read, so a trace no judge looks at is never
    turned into steps.
    """

    user_input: str = ""
    final_output: str = ""
    agent_name: str | None = None
    recognized: bool = False


class SpanViews:
    """A trace's spans read by the convention adapters and sorted into roles: what both
    the summary and the full view are made from."""

    __slots__ = ("views", "by_id", "by_depth", "containers", "llm_views", "tool_views", "retrieval_views")

    def __init__(self, spans: Sequence[tuple[Span, Resource]]):
        views = [_read(span) for span, _resource in spans]
        _set_depths(views)
        views.sort(key=_START_DEPTH)
        by_id = {v.span_id: v for v in views}
        llm_views: list[SpanView] = []
        tool_views: list[SpanView] = []
        containers: list[SpanView] = []
        nested_llm: list[SpanView] = []
        retrieval_views: list[SpanView] = []
        for view in views:
            role = view.role
            if role == LLM or role == TOOL:
                if not _inside(view, role, by_id):
                    (llm_views if role == LLM else tool_views).append(view)
                elif role == LLM:
                    nested_llm.append(view)
            elif role == AGENT or role == CHAIN:
                containers.append(view)
            elif role == RETRIEVAL and not _inside_retrieval_with_documents(view, by_id):
                retrieval_views.append(view)
        containers.sort(key=_DEPTH_START)
        if nested_llm:
            llm_views = _innermost_with_output(llm_views, nested_llm, by_id)
        self.views = views
        self.by_id = by_id
        self.by_depth = sorted(views, key=_DEPTH_START)
        self.containers = containers
        self.llm_views = _model_calls(llm_views)
        self.tool_views = [v for v in tool_views if (v.tool_name or v.name) not in INTERNAL_TOOLS]
        self.retrieval_views = retrieval_views


def read_span_views(trace_id: bytes, spans: Sequence[tuple[Span, Resource]]) -> SpanViews | None:
    """The spans' views, or None (logged) when reading them hit a bug."""
    try:
        return SpanViews(spans)
    except Exception:  # a bug here must not cost the trace its other metrics
        logger.exception("could not normalize trace %s", trace_id.hex())
        return None


def build_agent_trace(
    trace_id: bytes,
    spans: Sequence[tuple[Span, Resource]] | SpanViews | None,
    session_id: str | None = None,
) -> AgentTrace:
    """The normalized agent view of one trace's spans (any order, any convention), or of
    their views already read.

    `session_id` is the one the collector found for the trace; it is passed through.
    Spans are only read.
    """
    trace_hex = trace_id.hex() if isinstance(trace_id, (bytes, bytearray)) else str(trace_id)
    try:
        views = spans if isinstance(spans, SpanViews) or spans is None else SpanViews(spans)
        if views is None:
            return AgentTrace(trace_id=trace_hex, session_id=session_id)
        return _build(trace_hex, views, session_id)
    except Exception:  # a bug here must not cost the trace its other metrics
        logger.exception("could not normalize trace %s", trace_hex)
        return AgentTrace(trace_id=trace_hex, session_id=session_id)


def summarize(views: SpanViews | None) -> AgentSummary:
    """The trace-level fields `build_agent_trace` would give, read from the views alone."""
    if views is None:
        return AgentSummary()
    try:
        by_depth, containers, llm_views = views.by_depth, views.containers, views.llm_views
        user_input = (_user_input(by_depth, containers, llm_views) or "").strip()
        final_output = (_final_output(by_depth, containers, llm_views) or "").strip()
        # Steps come from the LLM and tool views: there are some exactly when there are views.
        has_steps = bool(llm_views or views.tool_views)
        recognized = any(view.conventions for view in views.views) and bool(has_steps or user_input or final_output)
        return AgentSummary(user_input, final_output, _agent_name(by_depth, containers), recognized)
    except Exception:  # a bug here must not cost the trace its other metrics
        logger.exception("could not summarize a trace")
        return AgentSummary()


def _build(trace_id: str, read: SpanViews, session_id: str | None) -> AgentTrace:
    views, by_depth, containers = read.views, read.by_depth, read.containers
    llm_views, tool_views = read.llm_views, read.tool_views
    llm_steps = [_llm_step(v) for v in llm_views]
    tool_steps = [_tool_step(v) for v in tool_views]
    tool_steps += _unobserved_tool_calls(llm_views, llm_steps, tool_steps)
    steps = llm_steps + tool_steps
    if read.retrieval_views:
        steps += [_retrieval_step(v) for v in read.retrieval_views]
    steps.sort(key=lambda s: (s.start_time_unix_nano, s.kind != "llm"))

    root = by_depth[0] if by_depth else None
    # All fields in one validated construction rather than assigned one by one; as
    # `conventions` is filled in place afterwards, the explicitly set fields are the same.
    trace = new_agent_trace(
        dict(
            trace_id=trace_id,
            session_id=session_id,
            steps=steps,
            available_tools=_available_tools(views, tool_views),
            user_input=(_user_input(by_depth, containers, llm_views) or "").strip(),
            final_output=(_final_output(by_depth, containers, llm_views) or "").strip(),
            agent_name=_agent_name(by_depth, containers),
            user_id=next((v.user_id for v in by_depth if v.user_id), None),
            system_prompt=_system_prompt(views, llm_steps),
            reasoning=_dedupe(text for step in llm_steps for text in step.reasoning),
            error=next((v.error for v in ([root] if root else []) + containers if v.error), None),
        )
    )
    conventions = trace.conventions
    for view in views:
        if view.conventions:
            conventions.update(view.conventions)
    return trace


def _read(span: Span) -> SpanView:
    view = SpanView(span)
    attrs = view.attrs
    adapters, reads_user_id = attrs.shape_fact(_readers)
    for name, adapter in adapters:
        try:
            adapter(view)
        except Exception as exc:  # malformed attributes: this adapter contributes nothing
            logger.debug("%s adapter skipped span %s: %r", name, view.span_id, exc)
    if reads_user_id:
        try:
            view.fill("user_id", attrs.text(*USER_ID_KEYS))
        except Exception:
            pass
    return view


def _readers(shape: KeyShape) -> tuple[tuple[tuple[str, Adapter], ...], bool]:
    """The adapters that can read something from spans of this key shape (GenAI always:
    it also reads span events), and whether a user-id key could be among the keys."""
    present = {name for name, prefixes in _KEY_PREFIXES.items() if shape.under(prefixes)}
    adapters = tuple((name, adapter) for name, adapter in ADAPTERS if name in present or name not in _KEY_PREFIXES)
    return adapters, bool(shape.under(USER_ID_KEYS))


def _set_depths(views: list[SpanView]) -> None:
    parents = {v.span_id: v.parent_id for v in views}
    for view in views:
        parent = view.parent_id
        if parent not in parents:  # no parent in this trace: depth 0, the default
            continue
        depth, seen = 0, {view.span_id}
        while parent in parents and parent not in seen:
            seen.add(parent)
            depth += 1
            parent = parents[parent]
        view.depth = depth


def _inside(view: SpanView, role: str, by_id: dict[str, SpanView]) -> bool:
    parent, seen = view.parent_id, {view.span_id}
    while parent in by_id and parent not in seen:
        seen.add(parent)
        ancestor = by_id[parent]
        if ancestor.role == role:
            return True
        parent = ancestor.parent_id
    return False


def _inside_retrieval_with_documents(view: SpanView, by_id: dict[str, SpanView]) -> bool:
    parent, seen = view.parent_id, {view.span_id}
    while parent in by_id and parent not in seen:
        seen.add(parent)
        ancestor = by_id[parent]
        if ancestor.role == RETRIEVAL and ancestor.documents:
            return True
        parent = ancestor.parent_id
    return False


def _innermost_with_output(outer: list[SpanView], nested: list[SpanView], by_id: dict[str, SpanView]) -> list[SpanView]:
    """An LLM span without prompt or output that wraps LLM spans with output: the wrapped ones are the calls.

    LlamaIndex records `astream_chat` twice, the outer span with neither messages nor
    answer, and a query engine's `predict` around its `chat` with the answer but only a
    prompt template; the OpenAI Agents SDK's response span around an instrumented client
    call has both, and stays the one step.
    """
    chosen: list[SpanView] = []
    for view in outer:
        if view.output_messages and view.input_messages:
            chosen.append(view)
            continue
        inner = [n for n in nested if n.output_messages and _outermost_with_output_below(n, view, by_id)]
        chosen.extend(inner or [view])
    return sorted(chosen, key=_START_DEPTH)


def _outermost_with_output_below(view: SpanView, top: SpanView, by_id: dict[str, SpanView]) -> bool:
    """`view` lies under `top` with no other LLM span with output between them."""
    parent, seen = view.parent_id, {view.span_id}
    while parent in by_id and parent not in seen:
        seen.add(parent)
        if parent == top.span_id:
            return True
        ancestor = by_id[parent]
        if ancestor.role == LLM and ancestor.output_messages:
            return False
        parent = ancestor.parent_id
    return False


def _model_calls(views: list[SpanView]) -> list[SpanView]:
    """Drop LLM spans that record no call when others do (LlamaIndex's request building).

    A span with content, an error or evidence of a completed call (usage, a finish
    reason) stays; so does every span when none has any of these.
    """
    calls = [v for v in views if v.output_messages or v.input_messages or v.error or v.called]
    return calls if calls and len(calls) < len(views) else views


# -- steps ---------------------------------------------------------------------------


def _assistant_messages(view: SpanView) -> list[Message]:
    outputs = view.output_messages
    if not outputs:
        return []
    return [m for m in outputs if m.role in ("assistant", "model")] or outputs


def _llm_text(view: SpanView) -> str:
    """The text an LLM span produced: its step's `result`."""
    return "".join(m.content for m in _assistant_messages(view))


def _llm_step(view: SpanView) -> Step:
    assistant = _assistant_messages(view)
    if assistant:
        text = "".join(m.content for m in assistant)
        calls = [call for m in assistant for call in m.tool_calls]
        reasoning = [r for m in assistant for r in m.reasoning]
        # Text an LLM writes in the same turn as tool calls is its plan for them (the
        # Responses API returns it as a separate message item next to the calls).
        if calls:
            reasoning += [m.content for m in assistant if m.content.strip()]
    else:
        text, calls, reasoning = "", [], []
    return new_step(
        dict(
            kind="llm",
            name=view.name or (view.model or "llm"),
            span_id=view.span_id,
            parent_span_id=view.parent_id,
            start_time_unix_nano=view.start,
            end_time_unix_nano=view.end,
            result=text or None,
            error=view.error,
            model=view.model,
            input_messages=view.input_messages or [],
            tool_calls=calls,
            reasoning=reasoning,
            convention=_convention(view),
        )
    )


def _tool_step(view: SpanView) -> Step:
    return new_step(
        dict(
            kind="tool",
            name=view.tool_name or view.name or "tool",
            span_id=view.span_id,
            parent_span_id=view.parent_id,
            start_time_unix_nano=view.start,
            end_time_unix_nano=view.end,
            arguments=parse_arguments(unwrap(view.tool_arguments)),
            result=_result_text(view.tool_result),
            error=view.error,
            tool_call_id=view.tool_call_id,
            convention=_convention(view),
        )
    )


def _retrieval_step(view: SpanView) -> Step:
    return new_step(
        dict(
            kind="retrieval",
            name=view.name or "retrieval",
            span_id=view.span_id,
            parent_span_id=view.parent_id,
            start_time_unix_nano=view.start,
            end_time_unix_nano=view.end,
            error=view.error,
            model=view.model,
            query=view.retrieval_query,
            documents=view.documents or [],
            document_count=view.document_count,
            convention=_convention(view),
        )
    )


def _result_text(value: Any) -> str | None:
    return block_text(unwrap(value))


def _convention(view: SpanView) -> str | None:
    conventions = view.conventions
    if len(conventions) == 1:  # the usual case; whichever rule below picks it
        return next(iter(conventions))
    for name, _ in ADAPTERS:
        if name in conventions:
            return name
    return next(iter(sorted(conventions)), None)


def _unobserved_tool_calls(llm_views: list[SpanView], llm_steps: list[Step], tool_steps: list[Step]) -> list[Step]:
    """Steps for tool calls an LLM requested that no tool span recorded."""
    results: dict[str, Message] = {}
    for view in llm_views:
        for message in view.input_messages or []:
            if message.role == "tool" and message.tool_call_id:
                results.setdefault(message.tool_call_id, message)
    unmatched = list(tool_steps)
    extra: list[Step] = []
    for view, step in zip(llm_views, llm_steps):
        for call in step.tool_calls:
            if call.name in INTERNAL_TOOLS:
                continue
            span_step = _match(call, view, unmatched)
            if span_step is not None:
                unmatched.remove(span_step)
                if span_step.result is None and call.id in results:
                    span_step.result = results[call.id].content
                if span_step.tool_call_id is None:
                    span_step.tool_call_id = call.id
                # A tool span that recorded no arguments, or a bare value (LangChain's
                # tool input "Oslo"), is told what it was called with by the call itself.
                if not isinstance(span_step.arguments, dict) and isinstance(call.arguments, dict):
                    span_step.arguments = call.arguments
                continue
            answer = results.get(call.id) if call.id else None
            extra.append(
                Step(
                    kind="tool",
                    name=call.name,
                    span_id=view.span_id,
                    parent_span_id=view.parent_id,
                    start_time_unix_nano=view.end,
                    end_time_unix_nano=view.end,
                    arguments=call.arguments,
                    result=answer.content if answer is not None else None,
                    tool_call_id=call.id,
                    from_span=False,
                    convention=step.convention,
                )
            )
    return extra


def _match(call: ToolCall, view: SpanView, candidates: list[Step]) -> Step | None:
    if call.id:
        for step in candidates:
            if step.tool_call_id == call.id:
                return step
    later = [s for s in candidates if s.start_time_unix_nano >= view.start and s.name == call.name]
    for step in later:
        if step.tool_call_id in (None, call.id) and step.arguments == call.arguments:
            return step
    for step in later:
        if step.tool_call_id is None:
            return step
    return None


# -- trace-level fields --------------------------------------------------------------


def _user_input(by_depth: list[SpanView], containers: list[SpanView], llm_views: list[SpanView]) -> str | None:
    for view in by_depth:
        if view.trace_input is not None:
            text = io_text(view.trace_input)
            if text:
                return text
    for view in containers:
        text = input_text(view.input) if view.input is not None else last_user_text(view.input_messages or [])
        if text:
            return text
    for view in llm_views:
        text = last_user_text(view.input_messages or [])
        if text:
            return text
    return None


def _final_output(by_depth: list[SpanView], containers: list[SpanView], llm_views: list[SpanView]) -> str | None:
    for view in by_depth:
        if view.trace_output is not None:
            text = _output_text(view.trace_output)
            if text:
                return text
    for view in containers:
        if view.output is not None:
            text = output_text(view.output)
        else:
            text = "".join(m.content for m in view.output_messages or [] if m.role != "user")
        if text:
            return text
    for view in reversed(llm_views):
        text = _llm_text(view)
        if text:
            return text
    return None


def _output_text(value: Any) -> str | None:
    parsed = parse_json(value)
    if isinstance(parsed, (list, dict)):
        messages = normalize_messages(parsed, "assistant")
        text = "".join(m.content for m in messages if m.role in ("assistant", "model"))
        if text:
            return text
    return io_text(parsed)


def _agent_name(by_depth: list[SpanView], containers: list[SpanView]) -> str | None:
    for view in by_depth:
        if view.agent_name:
            return view.agent_name
    for view in by_depth:
        if view.trace_name:
            return view.trace_name
    for view in containers:
        if view.role == AGENT and view.name:
            # GenAI names agent spans "invoke_agent {gen_ai.agent.name}"; Python
            # frameworks name them for the agent's method ("weather_agent.run").
            name = view.name.removeprefix("invoke_agent").strip()
            method = _METHOD_SUFFIX.match(name)
            if method:
                name = method.group(1)
            if name:
                return name
    return None


def _system_prompt(views: list[SpanView], llm_steps: list[Step]) -> str | None:
    for view in views:
        if view.system_prompt:
            return view.system_prompt
    for step in llm_steps:
        for message in step.input_messages:
            if message.role in ("system", "developer") and message.content:
                return message.content
    return None


def _available_tools(views: list[SpanView], tool_views: list[SpanView]) -> list[ToolDefinition]:
    tools: dict[str, ToolDefinition] = {}
    for view in views:
        for tool in view.tools:
            _merge_tool(tools, tool)
    for view in tool_views:
        name = view.tool_name or view.name
        if not name:
            continue
        known = tools.get(name)
        if known is not None:
            # Merging fills only what the known tool lacks; setting None over None changes nothing.
            adds_description = known.description is None and view.tool_description is not None
            adds_parameters = known.parameters is None and view.tool_parameters is not None
            if not adds_description and not adds_parameters:
                continue
        parameters = parse_json(view.tool_parameters)
        tool = ToolDefinition(
            name=name,
            description=view.tool_description,
            parameters=parameters if isinstance(parameters, dict) else None,
        )
        if known is None:
            tools[name] = tool  # made here, so no copy is needed
        else:
            _merge_tool(tools, tool)
    return list(tools.values())


def _merge_tool(tools: dict[str, ToolDefinition], tool: ToolDefinition) -> None:
    known = tools.get(tool.name)
    if known is None:
        tools[tool.name] = tool.model_copy()
        return
    if known.description is None:
        known.description = tool.description
    if known.parameters is None:
        known.parameters = tool.parameters


def _dedupe(texts: Any) -> list[str]:
    seen: dict[str, None] = {}
    for text in texts:
        if text and text not in seen:
            seen[text] = None
    return list(seen)
