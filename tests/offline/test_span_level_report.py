"""`spanscore report` on span-level results: real files scored by `spanscore score`
(rag_metrics on the recorded LangChain RAG runs, and a run of many model calls), the
printout, the JSON summary and the HTML page checked against the roll-ups the scored
files hold; in headless Chromium, the section fits a desktop and a phone's width."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.otlp_json import encode_request
from spanscore.offline.span_level import TRACES_SHOWN, WORST_SPANS
from tests.support.agent_spans import make_span
from tests.support.chromium import chromium
from tests.support.devtools import DevTools
from tests.support.otlp_json import read_requests
from tests.support.processes import ROOT, run_spanscore
from tests.support.spans import request_of

LANGCHAIN_RAG = ROOT / "tests" / "fixtures" / "spans" / "frameworks" / "langchain_rag.jsonl"
CONFIG = """
receivers: {otlp: {protocols: {http: {endpoint: 127.0.0.1:0}}}}
processors:
  assembler: {trace_wait: 100ms}
  rag_metrics: {}
exporters: {file: {path: unused.jsonl}}
service:
  pipelines:
    traces: {receivers: [otlp], processors: [assembler, rag_metrics], exporters: [file]}
"""
DOCUMENT = "Items can be returned within 30 days of delivery."
QUESTION = "How long can I return items?"


def scored(tmp_path: Path, source: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / f"{source.stem}.scored.jsonl"
    result = run_spanscore("score", source, "-o", out, "--config", config, "--quiet", timeout=120)
    assert result.returncode == 0, result.stderr
    return out


def report(scored_file: Path, tmp_path: Path, *options: str) -> tuple[str, dict, str]:
    """The printout, the JSON summary and the page of `report` on `scored_file`."""
    summary, page = tmp_path / "summary.json", tmp_path / "report.html"
    result = run_spanscore("report", scored_file, "--json", summary, "-o", page, *options)
    assert result.returncode == 0, result.stderr
    return result.stdout, json.loads(summary.read_text()), page.read_text()


def roots_and_spans(path: Path) -> tuple[dict[str, dict], dict[str, tuple[str, dict]]]:
    """Per trace id its root's attributes; per span id its name and attributes."""
    roots, spans = {}, {}
    for request in read_requests(path):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = attributes_to_dict(span.attributes)
                    spans[span.span_id.hex()] = (span.name, attributes)
                    if not span.parent_span_id:
                        roots[span.trace_id.hex()] = attributes
    return roots, spans


@pytest.fixture(scope="module")
def rag(tmp_path_factory):
    """The LangChain RAG runs scored, and `report` on them: (file, printout, summary, page)."""
    tmp_path = tmp_path_factory.mktemp("rag")
    scored_file = scored(tmp_path, LANGCHAIN_RAG)
    return (scored_file, *report(scored_file, tmp_path))


def test_the_report_lists_each_trace_s_roll_ups_as_the_scored_file_holds_them(rag):
    scored_file, _, summary, _ = rag
    roots, _ = roots_and_spans(scored_file)
    assert "not_graded" in summary and "tsr" not in summary  # no ground truth: no suite rates
    listed = {trace["trace_id"]: trace for trace in summary["span_metrics"]}
    assert set(listed) == set(roots) and len(listed) == 2
    for trace_id, trace in listed.items():
        root = roots[trace_id]
        assert [m["metric"] for m in trace["metrics"]] == ["faithfulness", "context_relevance", "answer_relevance"]
        for m in trace["metrics"]:
            prefix = f"eval.{m['metric']}."
            assert (m["spans"], m["failing"]) == (root[prefix + "spans"], root[prefix + "failing"])
            assert (m["min"], m["mean"]) == (root[prefix + "min"], root[prefix + "mean"])
    # One run answered from what the passages do not say: its faithfulness fails, it comes first.
    first, second = summary["span_metrics"]
    assert [m["failing"] for m in first["metrics"]] == [1, 0, 0]
    assert all(m["failing"] == 0 and m["worst"] == [] for m in second["metrics"])


def test_a_failing_span_is_named_with_its_kind_and_explanation(rag):
    scored_file, printout, summary, _ = rag
    _, spans = roots_and_spans(scored_file)
    [failing] = summary["span_metrics"][0]["metrics"][0]["worst"]
    name, attributes = spans[failing["span_id"]]
    assert (failing["span_name"], failing["kind"]) == (name, "llm") == ("ChatOpenAI", "llm")
    assert failing["score"] == attributes["eval.faithfulness.score"] == 0.0
    assert failing["text"] == attributes["eval.faithfulness.explanation"]
    assert "not in any document: 2" in failing["text"]
    trace_id = summary["span_metrics"][0]["trace_id"]
    lines = printout.splitlines()
    at = lines.index(f"  trace {trace_id} docs_qa")
    assert lines[at + 1] == "    faithfulness: 1 span scored, 1 failing · min 0.00 · mean 0.00"
    assert lines[at + 2].startswith(f"      0.00 ChatOpenAI (llm, {failing['span_id']}): 0 of 1 sentences supported")
    assert lines[0].startswith("no suite rates: no graded attempts found")


def test_the_page_shows_the_roll_ups_and_the_failing_span(rag):
    _, _, summary, page = rag
    section = re.search(r"<section id=span-level>.*?</section>", page, re.S).group(0)
    text = unescape(re.sub(r"<[^>]+>", " ", section))
    for trace in summary["span_metrics"]:
        assert trace["trace_id"] in text
    [failing] = summary["span_metrics"][0]["metrics"][0]["worst"]
    assert "ChatOpenAI" in text and failing["span_id"] in text and "not in any document: 2" in text
    assert section.count("<tr class=failing>") == 1 and section.count("<tr class=passing>") == 5
    assert "span-level results only: no graded attempts" in page


def test_with_an_outcome_metric_the_suite_rates_and_the_span_level_results_are_both_shown(rag, tmp_path):
    scored_file = rag[0]
    printout, summary, page = report(scored_file, tmp_path, "--metric", "faithfulness")
    assert (summary["attempts"], summary["successes"]) == (2, 1)
    assert summary["span_metrics"] == rag[2]["span_metrics"]
    assert printout.startswith("TSR 1/2 = 0.500")
    assert "span-level metrics per trace" in printout
    assert "<h2>Cases</h2>" in page and "<section id=span-level>" in page


def many_calls(path: Path, calls: int = 8) -> Path:
    """A run that retrieves one document, then makes `calls` model calls: `answer 0`..`answer 5`
    unsupported by it (a number it does not hold, each a different one), `grounded 6`.. supported;
    and a span name holding markup."""
    trace_id = bytes.fromhex("5a" * 16)
    root = make_span(
        "qa <b>run</b>",
        {"openinference.span.kind": "CHAIN", "input.value": QUESTION, "output.value": DOCUMENT},
        start=0,
        end=100_000,
        trace_id=trace_id,
    )
    retrieve = make_span(
        "retrieve",
        {
            "openinference.span.kind": "RETRIEVER",
            "input.value": QUESTION,
            "retrieval.documents.0.document.content": DOCUMENT,
        },
        parent=root,
        start=10,
        end=60,
        trace_id=trace_id,
    )
    spans = [root, retrieve]
    for i in range(calls):
        answer = f"Items can be returned within {40 + i} days of delivery." if i < 6 else DOCUMENT
        spans.append(
            make_span(
                f"answer {i}" if i < 6 else f"grounded {i}",
                {
                    "openinference.span.kind": "LLM",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": QUESTION,
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": answer,
                },
                parent=root,
                start=100 + 100 * i,
                end=150 + 100 * i,
                trace_id=trace_id,
            )
        )
    path.write_text(encode_request(request_of(spans)) + "\n")
    return path


def test_a_trace_names_its_worst_five_failing_spans_and_counts_the_rest(tmp_path):
    scored_file = scored(tmp_path, many_calls(tmp_path / "many.jsonl"))
    roots, spans = roots_and_spans(scored_file)
    [root] = roots.values()
    assert (root["eval.faithfulness.spans"], root["eval.faithfulness.failing"]) == (8, 6)
    printout, summary, page = report(scored_file, tmp_path)
    [trace] = summary["span_metrics"]
    [faithfulness] = [m for m in trace["metrics"] if m["metric"] == "faithfulness"]
    worst = faithfulness["worst"]
    assert len(worst) == WORST_SPANS and faithfulness["not_shown"] == 6 - WORST_SPANS
    scores = [spans[w["span_id"]][1]["eval.faithfulness.score"] for w in worst]
    assert [w["score"] for w in worst] == scores == sorted(scores)  # lowest first, as on the spans
    assert {w["span_name"] for w in worst} < {f"answer {i}" for i in range(6)}
    assert "      ... and 1 more failing span, not listed" in printout.splitlines()
    # Text from the spans is escaped on the page.
    assert "qa &lt;b&gt;run&lt;/b&gt;" in page and "qa <b>run</b>" not in page
    assert "and 1 more failing span, not listed" in page


def test_the_printout_lists_at_most_twenty_traces_and_counts_the_rest(tmp_path):
    lines = []
    for n in range(TRACES_SHOWN + 2):
        spans = [span for span in _one_call_run(bytes([n + 1]) * 16)]
        lines.append(encode_request(request_of(spans)))
    source = tmp_path / "runs.jsonl"
    source.write_text("\n".join(lines) + "\n")
    printout, summary, _ = report(scored(tmp_path, source), tmp_path)
    assert len(summary["span_metrics"]) == TRACES_SHOWN + 2
    assert sum(line.startswith("  trace ") for line in printout.splitlines()) == TRACES_SHOWN
    assert "  ... and 2 more traces (see --json or -o)" in printout.splitlines()


def _one_call_run(trace_id: bytes):
    root = make_span("qa", {"openinference.span.kind": "CHAIN", "input.value": QUESTION}, trace_id=trace_id)
    retrieve = make_span(
        "retrieve",
        {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.content": DOCUMENT},
        parent=root,
        start=1_100,
        end=1_150,
        trace_id=trace_id,
    )
    model = make_span(
        "chat",
        {"openinference.span.kind": "LLM", "llm.output_messages.0.message.content": DOCUMENT},
        parent=root,
        start=1_200,
        end=1_250,
        trace_id=trace_id,
    )
    return root, retrieve, model


@pytest.mark.parametrize("width", [1280, 390])
def test_in_chromium_the_span_level_section_fits_the_page(rag, tmp_path, width):
    browser = chromium()
    page = tmp_path / "report.html"
    page.write_text(rag[3])
    devtools = DevTools(browser, tmp_path / "profile")
    try:
        devtools.load(page.as_uri(), width)
        fit = devtools.evaluate(
            "(() => { const d = document.querySelector('#span-level div.scroll');"
            " const li = document.querySelector('#span-level ul.worst li').getBoundingClientRect();"
            " return [d.scrollWidth, d.clientWidth, li.right, document.documentElement.clientWidth]; })()"
        )
    finally:
        devtools.close()
    scroll_width, client_width, item_right, page_width = fit
    assert scroll_width <= client_width and item_right <= page_width


def test_agree_meets_a_label_on_a_model_call_with_the_score_on_that_span(rag, tmp_path):
    scored_file, _, summary, _ = rag
    roots, spans = roots_and_spans(scored_file)
    failing_trace, passing_trace = (trace["trace_id"] for trace in summary["span_metrics"])
    [failing] = summary["span_metrics"][0]["metrics"][0]["worst"]
    passing = next(
        span_id
        for span_id, (name, attributes) in spans.items()
        if name == "ChatOpenAI" and attributes.get("eval.faithfulness.label") == "pass"
    )
    rows = [
        # People agree the one call failed, and think the other failed too: one disagreement, on that span.
        {"trace_id": failing_trace, "span_id": failing["span_id"], "metric": "faithfulness", "label": "fail"},
        {"trace_id": passing_trace, "span_id": passing, "metric": "faithfulness", "label": "fail"},
        # Without span_id, a label is about the root, where the roll-up is.
        {"trace_id": failing_trace, "metric": "faithfulness", "label": "fail"},
    ]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "agree.json"
    result = run_spanscore("agree", scored_file, "--labels", labels, "--metric", "faithfulness", "--json", out)
    assert result.returncode == 0, result.stderr
    [agreement] = json.loads(out.read_text())["results"]
    assert agreement["n"] == 3 and agreement["accuracy"]["estimate"] == pytest.approx(2 / 3)
    assert agreement["confusion"]["fail"] == {"fail": 2, "pass": 1}
    [disagreement] = agreement["disagreements"]
    assert (disagreement["trace_id"], disagreement["span_id"]) == (passing_trace, passing)
    assert roots[failing_trace]["eval.faithfulness.label"] == "fail"


def test_with_by_each_trace_names_its_group(rag, tmp_path):
    printout, summary, _ = report(rag[0], tmp_path, "--by", "service.name")
    assert {trace["group"] for trace in summary["span_metrics"]} == {"docs-qa-langchain"}
    assert sum(line.endswith(" docs_qa [docs-qa-langchain]") for line in printout.splitlines()) == 2
