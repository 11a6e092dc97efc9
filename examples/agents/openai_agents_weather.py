"""An OpenAI Agents SDK weather agent whose traces go to spanscore.

OpenInference's instrumentation takes the SDK's tracing (in place of its upload to the
OpenAI dashboard) and turns each run, model call and tool call into OpenTelemetry
spans; the OpenTelemetry SDK sends them over OTLP/HTTP to spanscore, which scores the
run and forwards it.

    spanscore run                      # in another shell: OTLP/HTTP on 127.0.0.1:4318
    export OPENAI_API_KEY=sk-...       # OPENAI_BASE_URL for another OpenAI-compatible server
    python openai_agents_weather.py

Environment: OPENAI_API_KEY, OPENAI_BASE_URL (read by the OpenAI client), OPENAI_MODEL
(default gpt-4.1-mini), OTEL_EXPORTER_OTLP_ENDPOINT (default http://127.0.0.1:4318),
OTEL_SERVICE_NAME (default weather-agent-openai-agents).
"""

import os
import uuid

from agents import Agent, RunConfig, Runner, function_tool
from openinference.instrumentation import using_session
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")
# The exporter appends /v1/traces; spanscore's OTLP/HTTP receiver listens on 4318.
os.environ.setdefault("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")

provider = TracerProvider(
    resource=Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME", "weather-agent-openai-agents"),
        }
    )
)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

REPORTS = {"paris": "Sunny, 22 C", "london": "Light rain, 14 C"}


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return REPORTS.get(city.strip().lower(), "Cloudy, 18 C")


agent = Agent(
    name="weather_agent",
    instructions="You are a weather assistant. Use the get_weather tool to answer.",
    tools=[get_weather],
    model=MODEL,
)


def main() -> None:
    # The instrumentation does not export the SDK's group_id, so the session id goes
    # on every span through OpenInference's using_session (session.id), which
    # spanscore groups the turns by and scores the session when it closes.
    session_id = f"weather-{uuid.uuid4().hex[:12]}"
    print(f"session {session_id}")
    history = []
    try:
        with using_session(session_id):
            for question in ("What's the weather in Paris?", "Should I take an umbrella?"):
                result = Runner.run_sync(
                    agent,
                    history + [{"role": "user", "content": question}],
                    run_config=RunConfig(workflow_name="weather", group_id=session_id),
                )
                history = result.to_input_list()
                print(f"> {question}\n{result.final_output}")
    finally:
        provider.shutdown()  # flushes the batched spans before the process exits


if __name__ == "__main__":
    main()
