"""examples/agents/langchain_rag.py, run as a user would run it, exporting to spanscore.

The app runs as a subprocess with LangChain's OpenInference instrumentation, its model
being the loopback OpenAI-protocol server playing `docs_qa_model` (it answers only when
the passage holding the answer reached its prompt; the first answer is faithful, the
second is not) and its OTLP/HTTP exporter pointed at an in-process spanscore, which
forwards what it assembled to a loopback OTLP sink. The spans that came out are checked
as the instrumentation made them, by span id: for each question a CHAIN root, under it
a RETRIEVER span holding the two retrieved passages as `retrieval.documents.{i}.*`, and
an LLM span, started after the retrieval ended, whose prompt holds those passages and
whose output is the answer; and the run's span tree is the one examples/agents/README.md
draws.

Which Python runs the app: see tests/support/example_agents.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

from spanscore.core.attributes import attributes_to_dict
from tests.fixtures.frameworks.docs_qa import TURNS, docs_qa_model
from tests.support.example_agents import EXAMPLES, INHERITED, RUN_TIMEOUT_S, require_framework
from tests.support.openai_server import OpenAIServer
from tests.support.running import sink_config, wait_until

APP = EXAMPLES / "langchain_rag.py"
README = EXAMPLES / "README.md"
README_TREE_INTRO = "OpenInference's LangChain instrumentation records each question as one trace:\n\n```\n"
# The modules the app imports beyond the standard library.
REQUIRES = (
    "langchain_core.vectorstores",
    "langchain_openai",
    "numpy",
    "openinference.instrumentation.langchain",
    "opentelemetry.sdk",
    "opentelemetry.exporter.otlp.proto.http",
)
SPAN_KIND = "openinference.span.kind"
PASSAGES_RETRIEVED = 2  # the app's retriever returns the two closest passages


def documents(attributes: dict) -> list[dict]:
    """The `retrieval.documents.{i}.document.*` attributes, one dict per document, in order."""
    found: dict[int, dict] = {}
    for key, value in attributes.items():
        if key.startswith("retrieval.documents."):
            index, _, field = key[len("retrieval.documents.") :].partition(".document.")
            found.setdefault(int(index), {})[field] = value
    assert sorted(found) == list(range(len(found))), sorted(found)
    return [found[i] for i in sorted(found)]


def ancestors(span, by_id: dict) -> list[bytes]:
    """The span ids from `span`'s parent up to its root; each must be in the trace."""
    chain = []
    while span.parent_span_id:
        assert span.parent_span_id in by_id, f"{span.name}: parent {span.parent_span_id.hex()} did not arrive"
        chain.append(span.parent_span_id)
        span = by_id[span.parent_span_id]
    return chain


def span_tree(span, children: dict, depth: int = 0) -> list[tuple[int, str, str]]:
    """(depth, name, span kind) of `span` and its descendants, each span's children in start order."""
    rows = [(depth, span.name, attributes_to_dict(span.attributes).get(SPAN_KIND))]
    for child in sorted(children.get(span.span_id, []), key=lambda s: s.start_time_unix_nano):
        rows += span_tree(child, children, depth + 1)
    return rows


def readme_tree() -> list[tuple[int, str, str]]:
    """The span tree examples/agents/README.md draws: (depth, name, kind) of each line."""
    block = README.read_text(encoding="utf-8").split(README_TREE_INTRO, 1)[1].split("```", 1)[0]
    rows = []
    for line in block.splitlines():
        at = re.search(r"[A-Za-z_]", line).start()  # past the "│   ├── " drawing, 4 columns a level
        name, kind = line[at:].split()[:2]
        rows.append((at // 4, name, kind))
    return rows


def test_rag_app_exports_its_retrieval_and_model_call(sink, start_collector):
    python = require_framework("langchain_rag", REQUIRES)
    collector = start_collector(sink_config(sink, assembler="trace_wait: 200ms"))
    with OpenAIServer(handler=docs_qa_model) as server:
        environment = {key: os.environ[key] for key in INHERITED if key in os.environ}
        environment.update(
            {
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "test-key",
                "OPENAI_MODEL": "gpt-test",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.http_port}",
            }
        )
        run = subprocess.run(
            [python, str(APP)],
            check=False,
            env=environment,
            cwd=EXAMPLES,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        prompts = [request.messages() for request in server.requests_to("/chat/completions")]
    assert run.returncode == 0, f"langchain_rag failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
    session_id = run.stdout.split()[1]  # the app's first line: "session <id>"
    for turn in TURNS:
        assert f"> {turn.question}\n{turn.answer}\n" in run.stdout, run.stdout
    assert len(prompts) == len(TURNS)

    def roots():
        return [s for s in sink.spans() if not s.parent_span_id]

    assert wait_until(lambda: len(roots()) == len(TURNS), timeout_s=15), [s.name for s in sink.spans()]
    spans = sink.spans()
    by_id = {span.span_id: span for span in spans}
    assert len(by_id) == len(spans)  # each span arrived once
    for turn, prompt in zip(TURNS, prompts):
        [root] = [r for r in roots() if attributes_to_dict(r.attributes).get("input.value") == turn.question]
        trace = [s for s in spans if s.trace_id == root.trace_id]
        kinds = {s.span_id: attributes_to_dict(s.attributes).get(SPAN_KIND) for s in trace}
        rooted = attributes_to_dict(root.attributes)
        assert root.name == "docs_qa"
        assert rooted[SPAN_KIND] == "CHAIN"
        assert rooted["output.value"] == turn.answer
        assert rooted["session.id"] == session_id

        # The retrieval: one RETRIEVER span in the run, holding the passages it returned.
        [retriever] = [s for s in trace if kinds[s.span_id] == "RETRIEVER"]
        retrieved = attributes_to_dict(retriever.attributes)
        assert retriever.name == "VectorStoreRetriever"
        assert ancestors(retriever, by_id)[-1] == root.span_id
        assert retrieved["input.value"] == turn.question
        docs = documents(retrieved)
        assert len(docs) == PASSAGES_RETRIEVED
        for doc in docs:
            assert set(doc) == {"content", "metadata"}  # LangChain's instrumentation records no id or score
            assert json.loads(doc["metadata"])["source"].endswith(".md")
        assert sum(turn.evidence in doc["content"] for doc in docs) == 1

        # The model call: one LLM span, after the retrieval, shown the passages; its answer.
        [llm] = [s for s in trace if kinds[s.span_id] == "LLM"]
        called = attributes_to_dict(llm.attributes)
        assert llm.name == "ChatOpenAI"
        assert ancestors(llm, by_id)[-1] == root.span_id
        assert retriever.span_id not in ancestors(llm, by_id)
        assert llm.start_time_unix_nano >= retriever.end_time_unix_nano
        system = called["llm.input_messages.0.message.content"]
        assert called["llm.input_messages.0.message.role"] == "system"
        assert all(doc["content"] in system for doc in docs)
        assert called["llm.input_messages.1.message.content"] == turn.question
        assert called["llm.output_messages.0.message.content"] == turn.answer
        # What the model server was sent is what the span says it was sent.
        assert [m["content"] for m in prompt] == [system, turn.question]

        # examples/agents/README.md draws this run's spans.
        children: dict[bytes, list] = {}
        for span in trace:
            children.setdefault(span.parent_span_id, []).append(span)
        assert span_tree(root, children) == readme_tree()
