"""A pydantic-ai weather agent whose traces go to spanscore.

pydantic-ai's own OpenTelemetry instrumentation (GenAI semantic conventions) records
the agent run, each model call and each tool call; the OpenTelemetry SDK sends them
over OTLP/HTTP to spanscore, which scores the run and forwards it.

    spanscore run                      # in another shell: OTLP/HTTP on 127.0.0.1:4318
    export OPENAI_API_KEY=sk-...       # OPENAI_BASE_URL for another OpenAI-compatible server
    python pydantic_ai_weather.py

Environment: OPENAI_API_KEY, OPENAI_BASE_URL (read by the OpenAI client), OPENAI_MODEL
(default gpt-4.1-mini), OTEL_EXPORTER_OTLP_ENDPOINT (default http://127.0.0.1:4318),
OTEL_SERVICE_NAME (default weather-agent-pydantic-ai).
"""

import os
import uuid

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")
# The exporter appends /v1/traces; spanscore's OTLP/HTTP receiver listens on 4318.
os.environ.setdefault("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")

provider = TracerProvider(
    resource=Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME", "weather-agent-pydantic-ai"),
        }
    )
)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
# include_content: the prompts and answers are what spanscore scores.
Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, include_content=True))

agent = Agent(
    OpenAIChatModel(MODEL),  # chat completions: spoken by most OpenAI-compatible servers too
    name="weather_agent",
    instructions="You are a weather assistant. Use the get_weather tool to answer.",
)

REPORTS = {"paris": "Sunny, 22 C", "london": "Light rain, 14 C"}


@agent.tool_plain
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return REPORTS.get(city.strip().lower(), "Cloudy, 18 C")


def main() -> None:
    # One conversation id for both turns: spanscore groups them into one session
    # (gen_ai.conversation.id) and scores the session when it closes.
    session_id = f"weather-{uuid.uuid4().hex[:12]}"
    print(f"session {session_id}")
    history = None
    try:
        for question in ("What's the weather in Paris?", "Should I take an umbrella?"):
            result = agent.run_sync(question, message_history=history, conversation_id=session_id)
            history = result.all_messages()
            print(f"> {question}\n{result.output}")
    finally:
        provider.shutdown()  # flushes the batched spans before the process exits


if __name__ == "__main__":
    main()
