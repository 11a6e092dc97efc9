"""A support agent's session of three turns sent over OTLP gRPC, one trace a turn (turn 2
repeats turn 1's answer: a loop), and the embedding and session metrics that score it."""

from __future__ import annotations

import json

from tests.support.otlp_client import grpc_export, send
from tests.support.spans import new_span_id, new_trace_id, request_of, span

METRICS = """\
  embedding_metrics: {embedder: {type: hashing}}
  session_metrics: {}"""

TURNS = [  # (question, answer); turn 2 repeats turn 1's answer word for word: a loop
    ("Where is my parcel 1234?", "Your parcel 1234 left the Lyon depot and arrives Thursday."),
    ("Can you check again?", "Your parcel 1234 left the Lyon depot and arrives Thursday."),
    ("Thanks. And my refund for order 77?", "Refund for order 77 was issued to your card today."),
]


def messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def send_session(collector, session_id: str = "support-9"):
    for i, (question, answer) in enumerate(TURNS):
        trace_id, root_id = new_trace_id(), new_span_id()
        root = span(
            trace_id,
            "invoke_agent support",
            span_id=root_id,
            start_ns=1_700_000_000_000_000_000 + i * 10**9,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "support",
                "gen_ai.conversation.id": session_id,
                "gen_ai.input.messages": messages("user", question),
                "gen_ai.output.messages": messages("assistant", answer),
            },
        )
        send(collector.grpc_port, request_of([root, span(trace_id, "chat", parent=root_id)]))


def send_turn(collector, name: str, trace_id: bytes | None = None) -> bytes:
    """One agent turn, its root alone, over OTLP gRPC; each its own answer (named after
    `name`), so a judge's cache does not answer a repeated prompt. Its trace id."""
    trace_id = trace_id or new_trace_id()
    grpc_export(collector.grpc_port, turn_request(name, trace_id).SerializeToString())
    return trace_id


def turn_request(name: str, trace_id: bytes):
    """The export request of `send_turn`'s agent turn."""
    root = span(
        trace_id,
        name,
        span_id=new_span_id(),
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "helper",
            "gen_ai.input.messages": messages("user", "Summarise my last order."),
            "gen_ai.output.messages": messages("assistant", f"A blue kettle, delivered Monday ({name})."),
        },
    )
    return request_of([root])
