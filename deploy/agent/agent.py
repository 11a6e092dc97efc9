"""A stand-in agent for the compose demo: one scripted agent turn every few seconds.

Each turn is a trace in the OpenTelemetry GenAI conventions (invoke_agent, chat,
execute_tool, chat), three turns make a session, and no LLM is called. The exporter
reads the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME...).
AGENT_INTERVAL_SECONDS sets the pace (default 5), AGENT_TURNS stops after that many
turns (default 0: until SIGTERM).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

AGENT = "weather-agent"
MODEL = "gpt-4o-mini"
TURNS_PER_SESSION = 3

# question, tool arguments, tool result (None: the tool failed), answer. Some answers
# miss the question or fail, so the scores vary.
SCRIPT = [
    (
        "What's the weather in Paris?",
        {"city": "Paris"},
        {"temp_c": 21, "sky": "sunny"},
        "It is 21°C and sunny in Paris.",
    ),
    ("And in Lyon?", {"city": "Lyon"}, {"temp_c": 17, "sky": "light rain"}, "Lyon has light rain at 17°C."),
    ("Do I need an umbrella in Oslo?", {"city": "Oslo"}, None, "Sorry, I could not reach the weather service."),
    (
        "Is it warm in Madrid today?",
        {"city": "Madrid"},
        {"temp_c": 29, "sky": "clear"},
        "Madrid is warm today: 29°C under a clear sky.",
    ),
    ("What's the weather in Rome?", {"city": "Rome"}, {"temp_c": 24, "sky": "cloudy"}, "Here is a pasta recipe."),
]


def messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def run_turn(tracer, session_id: str, turn: int) -> None:
    question, arguments, result, answer = SCRIPT[turn % len(SCRIPT)]
    # session.id on every span, not only the root: a Collector routing on it
    # (deploy/loadbalancing) then keeps the whole trace on one spanscore replica.
    common = {"session.id": session_id, "gen_ai.conversation.id": session_id}
    with tracer.start_as_current_span(
        f"invoke_agent {AGENT}",
        attributes={
            **common,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT,
            "gen_ai.input.messages": messages("user", question),
        },
    ) as root:
        with tracer.start_as_current_span(
            f"chat {MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                **common,
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": MODEL,
                "gen_ai.usage.input_tokens": 112,
                "gen_ai.usage.output_tokens": 18,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool get_weather",
            attributes={
                **common,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.arguments": json.dumps(arguments),
            },
        ) as tool:
            if result is None:
                tool.set_attribute("error.type", "TimeoutError")
                tool.set_status(Status(StatusCode.ERROR, "weather service timed out"))
            else:
                tool.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        with tracer.start_as_current_span(
            f"chat {MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                **common,
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": MODEL,
                "gen_ai.usage.input_tokens": 160,
                "gen_ai.usage.output_tokens": 31,
            },
        ):
            pass
        root.set_attribute("gen_ai.output.messages", messages("assistant", answer))


def main() -> None:
    interval = float(os.environ.get("AGENT_INTERVAL_SECONDS", "5"))
    turns = int(os.environ.get("AGENT_TURNS", "0"))
    stop = threading.Event()
    # Docker and Kubernetes stop with SIGTERM: end the loop so the last spans are flushed.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    os.environ.setdefault("OTEL_SERVICE_NAME", AGENT)
    provider = TracerProvider(resource=Resource.create())  # reads OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer(AGENT)
    turn = 0
    session_id = ""
    try:
        while not stop.is_set() and (turns == 0 or turn < turns):
            if turn % TURNS_PER_SESSION == 0:
                session_id = f"session-{uuid.uuid4().hex[:12]}"
            run_turn(tracer, session_id, turn)
            print(f"turn {turn} sent (session {session_id})", flush=True)
            turn += 1
            stop.wait(interval)
    except KeyboardInterrupt:
        pass
    finally:
        provider.shutdown()  # flushes what the batch processor still holds


if __name__ == "__main__":
    main()
