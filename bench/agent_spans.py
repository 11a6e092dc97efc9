"""Agent-like OTLP export requests, generated fast enough not to be the bottleneck.

A template request (traces of one `invoke_agent` root, LLM and tool children, 6
attributes, ~440 bytes per span) is serialized once; each new request is the template
with fresh trace ids, span ids, parent ids, session numbers and order numbers written in
at byte offsets found once, so generating a 512-span request costs tens of microseconds.
The order number appears in each trace's question and answer, so their texts differ
from trace to trace as live traffic's do (an embedding cache cannot hide the embedder).
"""

from __future__ import annotations

import os

import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

SESSION_DIGITS = 8
ORDER_DIGITS = 8
_INPUT = '[{"role":"user","parts":[{"type":"text","content":"QUESTION"}]}]'
_OUTPUT = '[{"role":"assistant","parts":[{"type":"text","content":"ANSWER"}],"finish_reason":"stop"}]'
# The one exchange of every trace, unless `conversations`.
EXCHANGE = (
    "Where is my order ORDER? It was due yesterday.",
    "Your order ORDER shipped on Monday and left the Lyon depot this morning; DPD expects to deliver it on Thursday.",
)
# With `conversations`, a session's turns in order: each asks something else, each answer
# answers it (coherence and loop_detection pass with the static embedder, as on most
# live traffic), unless its tool call failed.
TURNS = (
    EXCHANGE,
    (
        "Can I change the delivery address for order ORDER?",
        "Yes: the delivery address of order ORDER is now 4 rue Victor Hugo, Lyon; DPD has the change.",
    ),
    (
        "What is the tracking number of order ORDER?",
        "The tracking number of order ORDER is FR123456789; you can follow it on the DPD site.",
    ),
    (
        "Please cancel order ORDER and refund me.",
        "Order ORDER is cancelled and the refund of 42.90 EUR goes back to your card within five days.",
    ),
)
TOOL_FAILURE = "search_orders: upstream answered 503 Service Unavailable"


def _kv(key, value):
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


class AgentRequests:
    """`conversations`: each turn of a session a different exchange (TURNS), and the tool
    calls of one trace in `failing_every` (0: none) fail with an error status."""

    def __init__(
        self,
        spans_per_request: int = 512,
        spans_per_trace: int = 8,
        traces_per_session: int = 4,
        seed: int = 1,
        conversations: bool = False,
        failing_every: int = 0,
    ):
        assert spans_per_request % spans_per_trace == 0
        assert traces_per_session <= len(TURNS) or not conversations
        self.spans_per_trace = spans_per_trace
        self.traces_per_request = spans_per_request // spans_per_trace
        self.spans_per_request = spans_per_request
        self.traces_per_session = traces_per_session
        self._rng = np.random.default_rng(seed)
        self._traces_made = 0
        markers = _Markers()
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend([_kv("service.name", "bench-agent"), _kv("service.version", "1.4.2")])
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "bench.agent"
        layout = []  # per span: (trace marker, span marker, parent marker or None, session marker or None)
        order_markers = []
        for t in range(self.traces_per_request):
            trace_marker, root_marker = markers.new(16), markers.new(8)
            session_marker = markers.new_digits(SESSION_DIGITS)
            order_marker = markers.new_digits(ORDER_DIGITS)
            order = order_marker.decode()
            order_markers.append(order_marker)
            question, answer = TURNS[t % traces_per_session] if conversations else EXCHANGE
            failing = failing_every > 0 and t % failing_every == failing_every - 1
            for i in range(spans_per_trace):
                span_marker = root_marker if i == 0 else markers.new(8)
                root = i == 0
                tool = i % 2 == 0
                if root:
                    name = "invoke_agent support"
                    attributes = [
                        _kv("gen_ai.operation.name", "invoke_agent"),
                        _kv("gen_ai.agent.name", "support"),
                        _kv("session.id", "session-" + session_marker.decode()),
                        _kv("gen_ai.input.messages", _INPUT.replace("QUESTION", question).replace("ORDER", order)),
                        _kv("gen_ai.output.messages", _OUTPUT.replace("ANSWER", answer).replace("ORDER", order)),
                        _kv("gen_ai.usage.input_tokens", 1200),
                    ]
                elif tool:
                    name = "execute_tool search_orders"
                    attributes = [
                        _kv("gen_ai.operation.name", "execute_tool"),
                        _kv("gen_ai.tool.name", "search_orders"),
                        _kv("gen_ai.tool.call.id", f"call_{t:03d}_{i}"),
                        _kv("gen_ai.tool.call.arguments", '{"order_id": "1234", "fields": ["status", "eta", "depot"]}'),
                        _kv(
                            "gen_ai.tool.call.result",
                            '{"status": "shipped", "eta": "Thursday", "depot": "Lyon", '
                            '"carrier": "DPD", "tracking": "FR123456789", "signed": false, "attempts": 0}',
                        ),
                        _kv("gen_ai.agent.name", "support"),
                    ]
                else:
                    name = "chat gpt-4o-mini"
                    attributes = [
                        _kv("gen_ai.operation.name", "chat"),
                        _kv("gen_ai.request.model", "gpt-4o-mini"),
                        _kv("gen_ai.usage.input_tokens", 1200 + i),
                        _kv("gen_ai.usage.output_tokens", 80 + i),
                        _kv("gen_ai.response.finish_reasons", "tool_calls"),
                        _kv(
                            "gen_ai.response.id", f"chatcmpl-{t:04d}{i:02d}-bench-response-identifier-0001-eu-west-1-b7"
                        ),
                    ]
                scope_spans.spans.append(
                    Span(
                        trace_id=trace_marker,
                        span_id=span_marker,
                        parent_span_id=b"" if root else root_marker,
                        name=name,
                        kind=Span.SPAN_KIND_INTERNAL if root else Span.SPAN_KIND_CLIENT,
                        start_time_unix_nano=1_700_000_000_000_000_000 + i * 1_000_000,
                        end_time_unix_nano=1_700_000_000_400_000_000,
                        attributes=attributes,
                        status=Status(code=Status.STATUS_CODE_ERROR, message=TOOL_FAILURE)
                        if failing and tool and not root
                        else None,
                    )
                )
                layout.append(
                    (trace_marker, span_marker, None if root else root_marker, session_marker if root else None)
                )
        template = request.SerializeToString()
        self.template = np.frombuffer(template, dtype=np.uint8)
        self.bytes_per_span = len(template) / spans_per_request
        trace_offsets, root_offsets, child_span_offsets, parent_offsets, session_offsets = [], [], [], [], []
        position = 0
        for trace_marker, span_marker, parent_marker, session_marker in layout:
            position = template.index(trace_marker, position)
            trace_offsets.append(position)
            span_at = template.index(span_marker, position)
            (root_offsets if parent_marker is None else child_span_offsets).append(span_at)
            if parent_marker is not None:
                parent_offsets.append(template.index(parent_marker, position))
            if session_marker is not None:
                session_offsets.append(template.index(session_marker, position))
            position = span_at
        self._trace_idx = np.add.outer(np.array(trace_offsets), np.arange(16)).ravel()
        self._root_idx = np.add.outer(np.array(root_offsets), np.arange(8)).ravel()
        self._child_idx = np.add.outer(np.array(child_span_offsets), np.arange(8)).ravel()
        self._parent_idx = np.add.outer(np.array(parent_offsets), np.arange(8)).ravel()
        self._session_idx = np.add.outer(np.array(session_offsets), np.arange(SESSION_DIGITS)).ravel()
        order_offsets = []  # per trace: its question's and its answer's order number
        position = 0
        for marker in order_markers:
            first = template.index(marker, position)
            second = template.index(marker, first + ORDER_DIGITS)
            order_offsets.append((first, second))
            position = second
        self._order_idx = np.add.outer(np.array(order_offsets).ravel(), np.arange(ORDER_DIGITS)).ravel()
        self._digit_powers = 10 ** np.arange(SESSION_DIGITS - 1, -1, -1)

    def make(self) -> tuple[bytes, np.ndarray]:
        """A fresh request and the trace ids in it (rows of 16 bytes)."""
        n_traces, per_trace = self.traces_per_request, self.spans_per_trace
        buffer = self.template.copy()
        trace_ids = self._rng.integers(1, 256, size=(n_traces, 16), dtype=np.uint8)
        root_ids = self._rng.integers(1, 256, size=(n_traces, 8), dtype=np.uint8)
        child_ids = self._rng.integers(1, 256, size=(n_traces * (per_trace - 1), 8), dtype=np.uint8)
        buffer[self._trace_idx] = np.repeat(trace_ids, per_trace, axis=0).ravel()
        buffer[self._root_idx] = root_ids.ravel()
        buffer[self._child_idx] = child_ids.ravel()
        buffer[self._parent_idx] = np.repeat(root_ids, per_trace - 1, axis=0).ravel()
        sessions = (self._traces_made + np.arange(n_traces)) // self.traces_per_session
        digits = (sessions[:, None] // self._digit_powers) % 10 + ord("0")
        buffer[self._session_idx] = digits.astype(np.uint8).ravel()
        orders = self._rng.integers(ord("0"), ord("9") + 1, size=(n_traces, 1, ORDER_DIGITS), dtype=np.uint8)
        buffer[self._order_idx] = np.repeat(orders, 2, axis=1).ravel()
        self._traces_made += n_traces
        return buffer.tobytes(), trace_ids


class _Markers:
    """Random byte strings that cannot occur twice in the template by chance."""

    def __init__(self):
        self._seen: set[bytes] = set()

    def new(self, size: int) -> bytes:
        while True:
            value = os.urandom(size)
            if value not in self._seen and all(value):
                self._seen.add(value)
                return value

    def new_digits(self, size: int) -> bytes:
        while True:
            value = str(int.from_bytes(os.urandom(8), "big") % 10**size).zfill(size).encode()
            if value not in self._seen:
                self._seen.add(value)
                return value
