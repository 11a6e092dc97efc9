"""A LangGraph ReAct weather agent whose traces go to spanscore.

OpenInference's LangChain instrumentation records the graph run, each model call and
each tool call; the OpenTelemetry SDK sends them over OTLP/HTTP to spanscore, which
scores the run and forwards it.

    spanscore run                      # in another shell: OTLP/HTTP on 127.0.0.1:4318
    export OPENAI_API_KEY=sk-...       # OPENAI_BASE_URL for another OpenAI-compatible server
    python langgraph_weather.py

Environment: OPENAI_API_KEY, OPENAI_BASE_URL (read by the OpenAI client), OPENAI_MODEL
(default gpt-4.1-mini), OTEL_EXPORTER_OTLP_ENDPOINT (default http://127.0.0.1:4318),
OTEL_SERVICE_NAME (default weather-agent-langgraph).
"""

import os
import uuid
import warnings

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import MemorySaver
from langgraph.prebuilt import create_react_agent
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

# LangGraph 1.x points to langchain.agents.create_agent; the prebuilt agent still works.
warnings.filterwarnings("ignore", message="create_react_agent has been moved")

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")
# The exporter appends /v1/traces; spanscore's OTLP/HTTP receiver listens on 4318.
os.environ.setdefault("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")

provider = TracerProvider(
    resource=Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME", "weather-agent-langgraph"),
        }
    )
)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
LangChainInstrumentor().instrument(tracer_provider=provider)

REPORTS = {"paris": "Sunny, 22 C", "london": "Light rain, 14 C"}


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return REPORTS.get(city.strip().lower(), "Cloudy, 18 C")


agent = create_react_agent(
    ChatOpenAI(model=MODEL),
    [get_weather],
    prompt="You are a weather assistant. Use the get_weather tool to answer.",
    checkpointer=MemorySaver(),  # keeps the conversation between turns, by thread id
    name="weather_agent",
)


def main() -> None:
    # The thread id is the session: OpenInference records it as session.id, which
    # spanscore groups the turns by and scores the session when it closes.
    session_id = f"weather-{uuid.uuid4().hex[:12]}"
    print(f"session {session_id}")
    config = {"configurable": {"thread_id": session_id}}
    try:
        for question in ("What's the weather in Paris?", "Should I take an umbrella?"):
            state = agent.invoke({"messages": [("user", question)]}, config)
            print(f"> {question}\n{state['messages'][-1].content}")
    finally:
        provider.shutdown()  # flushes the batched spans before the process exits


if __name__ == "__main__":
    main()
