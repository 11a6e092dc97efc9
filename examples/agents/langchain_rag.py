"""A retrieval-augmented question answerer on LangChain whose traces go to spanscore.

A small in-memory index holds four passages of spanscore's own documentation; each
question retrieves the two passages closest to it and the model answers from them.
OpenInference's LangChain instrumentation records each run as a CHAIN root with a
RETRIEVER span (the documents it returned, as `retrieval.documents.{i}.document.*`) and
an LLM span (the prompt holding those documents, and the answer); the OpenTelemetry SDK
sends them over OTLP/HTTP to spanscore.

    spanscore run                      # in another shell: OTLP/HTTP on 127.0.0.1:4318
    export OPENAI_API_KEY=sk-...       # OPENAI_BASE_URL for another OpenAI-compatible server
    python langchain_rag.py

Environment: OPENAI_API_KEY, OPENAI_BASE_URL (read by the OpenAI client), OPENAI_MODEL
(default gpt-4.1-mini), OTEL_EXPORTER_OTLP_ENDPOINT (default http://127.0.0.1:4318),
OTEL_SERVICE_NAME (default docs-qa-langchain).
"""

import hashlib
import math
import os
import re
import uuid

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")
# The exporter appends /v1/traces; spanscore's OTLP/HTTP receiver listens on 4318.
os.environ.setdefault("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")

provider = TracerProvider(
    resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "docs-qa-langchain")})
)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
LangChainInstrumentor().instrument(tracer_provider=provider)

# Passages of spanscore's documentation; `source` names the page each comes from.
PASSAGES = [
    (
        "assembler-timing",
        "docs/configuration.md",
        "The assembler releases a trace when it is ready: its root span has arrived and no span came "
        "for trace_wait (default 1s), or 30s after its first span, root or not (trace_timeout; the "
        "trace is then marked incomplete). A session closes session_idle (default 5m) after its last "
        "trace, or at shutdown.",
    ),
    (
        "session-carrier",
        "docs/score-encoding.md",
        "When a session closes (after session_idle, at shutdown, or at the end of the input of "
        "spanscore score) and its processors return results, spanscore writes them on a new span in "
        "a trace of its own, named evaluate_session, with the session's id in session.id.",
    ),
    (
        "root-span",
        "docs/configuration.md",
        "A root span is a span without a parent, or whose parent is marked remote, so an agent called "
        "by another service still has a root.",
    ),
    (
        "what-it-is",
        "README.md",
        "spanscore is an OpenTelemetry collector for AI agents. Point an agent's existing OTLP exporter "
        "at it; it assembles spans into traces and traces into sessions, lets scoring processors "
        "evaluate them, writes the scores onto the spans, and forwards everything to the backend you "
        "already run.",
    ),
]
QUESTIONS = (
    "How long after its last trace does a session close?",
    "When is a trace released if its root span never arrives?",
)


class WordHashEmbeddings(Embeddings):
    """Bag-of-words vectors (each word hashed to one of 256 dimensions), so the example
    runs with no embedding model; put OpenAIEmbeddings or any LangChain embeddings here
    for a real index."""

    dimensions = 256

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in re.findall(r"[a-z0-9_]+", text.lower()):
            vector[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % self.dimensions] += 1
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]


index = InMemoryVectorStore(WordHashEmbeddings())
index.add_documents(
    [Document(id=doc_id, page_content=text, metadata={"source": source}) for doc_id, source, text in PASSAGES]
)
prompt = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer the question from these passages of spanscore's documentation only.\n\n{context}"),
        ("human", "{question}"),
    ]
)


def passages_text(documents: list[Document]) -> str:
    return "\n\n".join(f"[{d.metadata['source']}] {d.page_content}" for d in documents)


# One LangChain run per question: retrieve, fill the prompt, ask the model.
answer_chain = (
    {"context": index.as_retriever(search_kwargs={"k": 2}) | passages_text, "question": RunnablePassthrough()}
    | prompt
    | ChatOpenAI(model=MODEL, temperature=0)
    | StrOutputParser()
).with_config(run_name="docs_qa")


def main() -> None:
    # OpenInference records the run metadata's session_id as session.id, which spanscore
    # groups the questions by.
    session_id = f"docs-qa-{uuid.uuid4().hex[:12]}"
    print(f"session {session_id}")
    try:
        for question in QUESTIONS:
            answer = answer_chain.invoke(question, {"metadata": {"session_id": session_id}})
            print(f"> {question}\n{answer}")
    finally:
        provider.shutdown()  # flushes the batched spans before the process exits


if __name__ == "__main__":
    main()
