"""failure_localization's findings in the offline commands: `inspect` marks each blamed
step of a scored file, `report` counts the failure categories of the failed attempts in
its text, its JSON and its page ("Why runs fail", each attempt linked to the span blamed
for it), and a file scored without it reads as before.

Every scored file comes from a real `spanscore score` run with failure_localization on:
the TRAIL GAIA fixture, a small suite whose failed attempts met an HTTP 429 or a city
not found, and the sample session with its second get_weather call failing. The page is
also loaded in headless Chromium at 1,400 and 400 px (screenshots in /tmp/why-runs-fail-*.png).
"""

from __future__ import annotations

import html as html_module
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from spanscore.core.otlp_json import encode_request
from spanscore.offline.suite_html import BLAME_SCRIPT, BLAME_STYLE, GROUP_COLORS
from tests.support.chromium import chromium
from tests.support.devtools import DevTools
from tests.support.doc_samples import offline_environment
from tests.support.scored_suite import attempt as plain_attempt
from tests.support.scored_suite import attempt_root, score_suite
from tests.support.spans import kv, new_span_id, new_trace_id, request_of, span

ROOT = Path(__file__).resolve().parents[2]
TRAIL = ROOT / "tests" / "fixtures" / "trail" / "gaia-5.otlp.jsonl.gz"
BLAMED_TRACE = "3acaa3150977e199eddb95c64f2ada2e"
BLAMED_SPANS = ["3feda8d3fe26704d", "d91150965d295882", "a383a3205482f8db"]
SCREENSHOTS = {width: Path(f"/tmp/why-runs-fail-{width}.png") for width in (1400, 400)}

ALWAYS = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{score: {{agent_traces_only: true}}}}
  failure_localization: {{when: always}}
exporters: {{file: {{path: {unused}}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, failure_localization], exporters: [file]}}
"""

# Graded by ground_truth first, so failure_localization sees the failed attempts.
GRADED = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  ground_truth: {{dataset: {dataset}}}
  failure_localization: {{}}
exporters: {{debug: {{}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, ground_truth, failure_localization], exporters: [debug]}}
"""

# The tool must return the weather: a call that failed made no expected call.
CASES = """
cases:
  - id: oslo
    user_instruction: Weather in Oslo
    expected_tool_calls:
      - {tool: get_weather, parameters: [{name: city, value: Oslo}], output: {value: "Snowing, -3 C"}}
  - id: paris
    user_instruction: Weather in Paris
    expected_tool_calls:
      - {tool: get_weather, parameters: [{name: city, value: Paris}], output: {value: "Snowing, -3 C"}}
"""


def spanscore(*arguments: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spanscore", *map(str, arguments)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_environment(),
        check=False,
    )


def failed(span_: Span, message: str) -> Span:
    span_.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=message))
    return span_


def attempt(case_id: str, city: str, failure: str | None = None):
    """One attempt of the weather agent; `failure`: "429" (the weather API's GET under the
    tool call refused it), "not found" (the tool failed), "orphan" (a GET beside the tool
    call, under no step, got a 404)."""
    trace_id, root, tool = new_trace_id(), new_span_id(), new_span_id()
    spans = [attempt_root(trace_id, root, city)]
    result = {} if failure in ("429", "not found") else {"gen_ai.tool.call.result": "Snowing, -3 C"}
    tool_span = span(
        trace_id,
        "execute_tool get_weather",
        parent=root,
        span_id=tool,
        start_ns=1_700_000_000_100_000_000,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.arguments": json.dumps({"city": city}),
            **result,
        },
    )
    spans.append(tool_span)
    if failure == "429":
        failed(tool_span, "weather API failed")
        get = span(trace_id, "GET", parent=tool, start_ns=1_700_000_000_200_000_000)
        get.attributes.extend([kv("http.request.method", "GET"), kv("http.response.status_code", 429)])
        spans.append(failed(get, "HTTP 429"))
    elif failure == "not found":
        failed(tool_span, f"city not found: {city}")
    elif failure == "orphan":
        get = span(trace_id, "GET", parent=root, start_ns=1_700_000_000_300_000_000)
        get.attributes.extend([kv("http.request.method", "GET"), kv("http.response.status_code", 404)])
        spans.append(failed(get, "HTTP 404"))
    return request_of(spans, resource_attributes={"eval.case.id": case_id})


# oslo: 3 of 4 (one met a 429); paris: 2 of 5 (a 429, a city not found, a failed GET beside the tool call).
SUITE = [
    ("oslo", "Oslo", None),
    ("oslo", "Oslo", None),
    ("oslo", "Oslo", "429"),
    ("oslo", "Oslo", None),
    ("paris", "Paris", None),
    ("paris", "Pariss", "not found"),
    ("paris", "Paris", "429"),
    ("paris", "Paris", None),
    ("paris", "Parisx", "orphan"),
]


@pytest.fixture(scope="module")
def trail_scored(tmp_path_factory) -> Path:
    """The TRAIL fixture scored by `spanscore score` with failure_localization always on."""
    folder = tmp_path_factory.mktemp("trail")
    config = folder / "always.yaml"
    config.write_text(ALWAYS.format(unused=folder / "unused.jsonl"))
    result = spanscore("score", TRAIL, "--config", config, "-o", folder / "scored.jsonl", "--quiet")
    assert result.returncode == 0, result.stderr
    return folder / "scored.jsonl"


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    """SUITE graded and localized by `spanscore score`, reported with --json and -o."""
    folder = tmp_path_factory.mktemp("suite")
    (folder / "suite.yaml").write_text(CASES)
    (folder / "config.yaml").write_text(GRADED.format(dataset=folder / "suite.yaml"))
    (folder / "recorded.jsonl").write_text("".join(encode_request(attempt(*a)) + "\n" for a in SUITE))
    result = spanscore(
        "score", "recorded.jsonl", "--config", "config.yaml", "-o", "scored.jsonl", "--quiet", cwd=folder
    )
    assert result.returncode == 0, result.stderr
    report = spanscore(
        "report", "scored.jsonl", "--dataset", "suite.yaml", "--json", "summary.json", "-o", "report.html", cwd=folder
    )
    assert report.returncode == 0, report.stderr
    (folder / "report.txt").write_text(report.stdout)
    return folder


def blocks(printed: str) -> dict[str, list[str]]:
    """inspect's human output: trace id -> the lines of its block."""
    found = {}
    for block in printed.split("\n\n"):
        lines = block.splitlines()
        if lines and lines[0].startswith("trace "):
            found[lines[0].split()[1]] = lines
    return found


# inspect ---------------------------------------------------------------------------------


def test_inspect_marks_each_blamed_step_of_a_scored_trail_file(trail_scored):
    result = spanscore("inspect", trail_scored)
    assert (result.returncode, result.stderr) == (0, "")
    found = blocks(result.stdout)
    assert len(found) == 5
    lines = found[BLAMED_TRACE]
    marks = [(lines[i - 1].split(".")[0].strip(), line) for i, line in enumerate(lines) if "✗ blamed" in line]
    # Each under its step, the web_search call whose span (SearchInformationTool) was blamed.
    assert [step for step, _ in marks] == ["7", "9", "13"]
    for (_, line), span_id, impact in zip(marks, BLAMED_SPANS, ("low", "low", "medium")):
        assert line.startswith(
            f"       ✗ blamed span {span_id}: resource_not_found (system execution, {impact}): web_search failed: "
            "Exception: No results found for query: "
        )
    for i, line in enumerate(lines):
        if "✗ blamed" in line:
            assert lines[i - 1].split(". ", 1)[1].startswith("tool web_search ")
    summary = next(line for line in lines if line.startswith("  failure_localization: "))
    assert summary.startswith(
        "  failure_localization: resource_not_found, score 0.33, 3 errors: the run failed (6 spans with error "
        "status); first error at step 7 of 18, span 3feda8d3fe26704d (SearchInformationTool)"
    )
    # The other four failed nowhere: a summary line, no mark.
    for trace_id, other in found.items():
        if trace_id != BLAMED_TRACE:
            assert not any("✗" in line for line in other)
            assert any(line.startswith("  failure_localization: none_found, score 1.00, 0 errors: ") for line in other)


def test_inspect_json_lists_the_blamed_spans_per_step_and_per_trace(trail_scored):
    result = spanscore("inspect", "--json", trail_scored)
    records = {r["trace_id"]: r for r in map(json.loads, result.stdout.splitlines())}
    record = records[BLAMED_TRACE]
    assert [b["span_id"] for b in record["blamed"]] == BLAMED_SPANS
    assert [b["step"] for b in record["blamed"]] == [7, 9, 13]
    first = record["blamed"][0]
    assert {k: v for k, v in first.items() if k not in ("explanation", "evidence")} == {
        "span_id": "3feda8d3fe26704d",
        "span_name": "SearchInformationTool",
        "category": "resource_not_found",
        "group": "system_execution",
        "impact": "low",
        "source": "evidence",
        "step_span": True,
        "step": 7,
    }
    assert first["evidence"].startswith("Exception: No results found for query:")
    for number, step in enumerate(record["steps"], 1):
        assert [b["span_id"] for b in step["blamed"]] == [b["span_id"] for b in record["blamed"] if b["step"] == number]
    localization = record["failure_localization"]
    assert localization["label"] == "resource_not_found" and localization["span_ids"] == BLAMED_SPANS
    assert localization["score"] == pytest.approx(6 / 18)
    assert (localization["errors"], localization["errors_by_group"]["system_execution"]) == (3, 3)
    for trace_id, other in records.items():
        if trace_id != BLAMED_TRACE:
            assert other["blamed"] == [] and other["failure_localization"]["label"] == "none_found"
            assert all(step["blamed"] == [] for step in other["steps"])
    # Every key a blamed entry or the result has is one docs/cli.md lists.
    documented = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    keys = {"blamed", "failure_localization", *first, *localization}
    assert keys == {key for key in keys if f"`{key}`" in documented}


def test_inspect_shows_a_request_below_a_step_under_it_and_one_under_no_step_with_the_trace(suite):
    found = blocks(spanscore("inspect", suite / "scored.jsonl").stdout)
    below = [lines for lines in found.values() if any("'GET'" in line and "below this step" in line for line in lines)]
    assert len(below) == 2  # the two attempts that met a 429
    for lines in below:
        i = next(i for i, line in enumerate(lines) if "✗ blamed" in line)
        assert lines[i - 1].startswith('    1. tool get_weather  arguments={"city": ')
        assert re.fullmatch(
            r"       ✗ blamed span 'GET' [0-9a-f]{16}, below this step: rate_limiting \(system execution, medium\): "
            r"GET failed: HTTP 429",
            lines[i],
        )
    (orphan,) = [lines for lines in found.values() if any("in no step" in line for line in lines)]
    mark = next(line for line in orphan if "✗" in line)
    assert re.fullmatch(r"  ✗ blamed span 'GET' [0-9a-f]{16}, in no step: resource_not_found \(.*", mark)
    assert orphan.index(mark) > max(i for i, line in enumerate(orphan) if line.startswith("    "))


def test_inspect_escapes_the_text_of_a_finding(tmp_path):
    trace_id, root = new_trace_id(), new_span_id()
    tool = span(trace_id, "execute_tool t", parent=root, attributes={"gen_ai.operation.name": "execute_tool"})
    tool.events.add(
        name="gen_ai.evaluation.result",
        attributes=[
            kv("gen_ai.evaluation.name", "failure_localization"),
            kv("gen_ai.evaluation.explanation", "bad\x1b[31m\nERROR forged"),
            kv("eval.failure.category", "timeout\u202e"),
            kv("eval.failure.impact", "high"),
        ],
    )
    agent = span(trace_id, "invoke_agent a", span_id=root, attributes={"gen_ai.operation.name": "invoke_agent"})
    path = tmp_path / "scored.jsonl"
    path.write_text(encode_request(request_of([agent, tool])) + "\n")
    printed = spanscore("inspect", path).stdout
    (mark,) = [line for line in printed.splitlines() if "✗" in line]
    assert mark.endswith(": timeout\\u202e (unknown group, high): bad\\x1b[31m\\nERROR forged")
    assert "\x1b" not in printed and "\u202e" not in printed


# report ----------------------------------------------------------------------------------


def test_the_report_counts_the_failure_categories_of_the_failed_attempts(suite):
    lines = (suite / "report.txt").read_text().splitlines()
    start = lines.index(
        "failure categories of failed attempts (failure_localization on 4 of 4; an attempt counts once per category):"
    )
    assert lines[start + 1 : start + 3] == [
        "  rate_limiting: 2 attempts, system execution (oslo 1, paris 1)",
        "  resource_not_found: 2 attempts, system execution (paris 2)",
    ]
    assert lines[start + 3].startswith("ranges: ")
    summary = json.loads((suite / "summary.json").read_text())
    assert (summary["attempts"], summary["successes"]) == (9, 5)
    assert summary["failure_categories"] == [
        {
            "category": "rate_limiting",
            "group": "system_execution",
            "attempts": 2,
            "blamed_spans": 2,
            "cases": {"oslo": 1, "paris": 1},
        },
        {
            "category": "resource_not_found",
            "group": "system_execution",
            "attempts": 2,
            "blamed_spans": 2,
            "cases": {"paris": 2},
        },
    ]
    oslo, paris = summary["cases"]
    assert [(e["category"], e["attempts"]) for e in oslo["failure_categories"]] == [("rate_limiting", 1)]
    assert [(e["category"], e["attempts"]) for e in paris["failure_categories"]] == [
        ("resource_not_found", 2),
        ("rate_limiting", 1),
    ]
    (oslo_failure,) = oslo["failures"]
    assert oslo_failure["localized"] and oslo_failure["categories"] == ["rate_limiting"]
    (blame,) = oslo_failure["blamed"]
    assert (blame["trace_id"], blame["span_name"], blame["impact"], blame["evidence"], blame["explanation"]) == (
        oslo_failure["trace_id"],
        "GET",
        "medium",
        "HTTP 429",
        "GET failed: HTTP 429",
    )


def test_an_attempt_of_two_traces_gathers_the_blames_of_both(tmp_path):
    """The sample session, its second get_weather call failing with a 503, scored with the
    default config against the example suite: one attempt, the session's carrier."""
    session = json.loads((ROOT / "examples" / "weather-agent.json").read_text())
    for scope in session["resourceSpans"][0]["scopeSpans"]:
        for s in scope["spans"]:
            if s["spanId"] == "020000000000020a":
                s["attributes"] = [a for a in s["attributes"] if a["key"] != "gen_ai.tool.call.result"]
                s["status"] = {"code": 2, "message": "upstream weather service: 503 Service Unavailable"}
    (tmp_path / "session.json").write_text(json.dumps(session))
    dataset = ROOT / "examples" / "weather-suite-no-judge.yaml"
    scored = spanscore("score", "session.json", "--dataset", dataset, "-o", "scored.jsonl", "--quiet", cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    report = spanscore("report", "scored.jsonl", "--dataset", dataset, "--json", "s.json", "-o", "r.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "  service_error: 1 attempt, system execution (paris-then-lyon 1)" in report.stdout.splitlines()
    (case,) = json.loads((tmp_path / "s.json").read_text())["cases"]
    (failure,) = case["failures"]
    (blame,) = failure["blamed"]
    # Blamed in the second turn's trace, not on the carrier the attempt's outcome is on.
    assert blame["trace_id"] == "5c0e5c0e000000000000000000000002" != failure["trace_id"]
    assert blame["span_id"] == "020000000000020a" and blame["category"] == "service_error"
    page = (tmp_path / "r.html").read_text()
    assert "in trace <code>5c0e5c0e000000000000000000000002</code>" in page


def test_a_report_without_failure_localization_is_unchanged(tmp_path):
    scored, dataset = score_suite(tmp_path, [plain_attempt("oslo", "Oslo"), plain_attempt("oslo", "Bergen")])
    result = spanscore("report", scored, "--dataset", dataset, "--json", tmp_path / "s.json", "-o", tmp_path / "r.html")
    assert result.returncode == 0, result.stderr
    assert "failure categories" not in result.stdout
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["failure_categories"] == [] and summary["cases"][0]["failure_categories"] == []
    assert summary["cases"][0]["failures"][0]["localized"] is False
    page = (tmp_path / "r.html").read_text()
    assert "Why runs fail" not in page and "blamed" not in page
    assert BLAME_STYLE not in page and BLAME_SCRIPT not in page


# The page ---------------------------------------------------------------------------------


def links_and_ids(page: str) -> tuple[list[str], set[str]]:
    return re.findall(r'href="#([^"]+)"', page), set(re.findall(r'\bid="([^"]+)"', page))


def test_the_page_charts_why_runs_fail_and_every_link_has_its_target(suite):
    page = (suite / "report.html").read_text()
    section = re.search(r"<section><h2>Why runs fail</h2>.*?</section>", page, re.S).group(0)
    chart = re.search(r'<svg[^>]*aria-label="failure categories of failed attempts">.*?</svg>', section, re.S)
    assert chart is not None
    bars = re.findall(
        r'<rect x="[\d.]+" y="[\d.]+" width="([\d.]+)" height="12" rx="2" fill="(#[0-9a-f]+)"/>', chart[0]
    )
    # Two attempts each, both system execution: bars of one length and one color.
    assert len(bars) == 2 and bars[0] == bars[1] and bars[0][1] == GROUP_COLORS["system_execution"]
    links, ids = links_and_ids(page)
    attempt_links = [link for link in links if "-why-" not in link]
    assert len(attempt_links) == 4  # 2 categories x 2 failed attempts each
    assert all(link in ids for link in links)
    # Each attempt's link lands on its blamed span, shown with its id, name, category, impact, evidence, explanation.
    for link in attempt_links:
        blame = re.search(rf'<li class=blame id="{link}">(.*?)</li>', page).group(1)
        text = html_module.unescape(re.sub(r"<[^>]+>", "", blame))
        assert re.search(r"on span [0-9a-f]{16} (GET|execute_tool get_weather)", text)
        assert "impact medium" in text and "evidence: " in text and " failed: " in text
    # The bars link to their category's list.
    assert [link for link in links if "-why-" in link] == ["g0-why-0", "g0-why-1"]


LAYOUT = """
(function () {
  var svg = document.querySelector('svg[aria-label="failure categories of failed attempts"]');
  var r = svg.getBoundingClientRect(), vb = svg.viewBox.baseVal, texts = [];
  svg.querySelectorAll('text').forEach(function (t) {
    var b = t.getBoundingClientRect();
    texts.push([t.textContent, b.left >= r.left - 0.5 && b.right <= r.right + 0.5]);
  });
  var why = document.querySelector('.why-body').getBoundingClientRect();
  return {innerWidth: innerWidth, scrollWidth: document.documentElement.scrollWidth,
          chart: [r.left, r.right, r.width, r.height], scale: r.width / vb.width, texts: texts,
          why: [why.left, why.right]};
})()
"""

FOLLOW = """
(function () {
  var link = document.querySelector('.why-cat a[href^="#"]');
  var id = link.getAttribute('href').slice(1);
  var before = document.getElementById(id).closest('tr.detail').hidden;
  link.click();
  return {id: id, before: before};
})()
"""

LANDED = """
(function (id) {
  var target = document.getElementById(id), r = target.getBoundingClientRect();
  return {hidden: target.closest('tr.detail').hidden, top: r.top, bottom: r.bottom, height: innerHeight, left: r.left,
          expanded: target.closest('tr.detail').previousElementSibling.querySelector('button.open')
                      .getAttribute('aria-expanded')};
})
"""


@pytest.fixture(scope="module")
def browsed(suite, tmp_path_factory) -> dict[int, dict]:
    """The page in headless Chromium at each width: its layout, then a link followed."""
    devtools = DevTools(chromium(), tmp_path_factory.mktemp("chromium") / "profile")
    made = {}
    try:
        for width, screenshot in SCREENSHOTS.items():
            devtools.load((suite / "report.html").as_uri(), width)
            layout = devtools.evaluate(LAYOUT)
            followed = devtools.evaluate(FOLLOW)
            devtools.evaluate("new Promise(function (done) { setTimeout(done, 300); })")
            landed = devtools.evaluate(f"({LANDED})({json.dumps(followed['id'])})")
            devtools.screenshot(screenshot, width)
            made[width] = {"layout": layout, "followed": followed, "landed": landed}
    finally:
        devtools.close()
    return made


WIDTHS = pytest.mark.parametrize("width", sorted(SCREENSHOTS))


@WIDTHS
def test_in_chromium_the_chart_fits_the_page_and_its_texts_fit_the_chart(browsed, width):
    layout = browsed[width]["layout"]
    assert layout["innerWidth"] == width and layout["scrollWidth"] <= width
    left, right, chart_width, chart_height = layout["chart"]
    assert 0 <= left and right <= width and chart_width > 0 and chart_height > 0
    assert layout["scale"] > 0.85  # not shrunk past reading at 400 px
    assert layout["texts"] and all(inside for _, inside in layout["texts"]), layout["texts"]
    why_left, why_right = layout["why"]
    assert 0 <= why_left and why_right <= width


@WIDTHS
def test_in_chromium_a_link_opens_the_case_and_shows_the_blamed_span(browsed, width):
    followed, landed = browsed[width]["followed"], browsed[width]["landed"]
    assert followed["before"] is True  # the case's row was closed
    assert landed["hidden"] is False and landed["expanded"] == "true"
    assert 0 <= landed["top"] and landed["bottom"] <= landed["height"]
    assert 0 <= landed["left"] < width - 200  # its text starts in view, sideways too


def test_in_chromium_a_screenshot_of_each_width(browsed):
    for width, path in SCREENSHOTS.items():
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(data[16:20], "big") == width


def test_score_dataset_puts_the_ground_truth_it_adds_before_failure_localization():
    # failure_localization reads the verdicts of the processors before it: a failed
    # ground-truth check must be among them.
    from spanscore.config.loader import load_config
    from spanscore.offline.score_files import with_dataset

    config = with_dataset(load_config(ROOT / "otel-config.yaml"), ROOT / "examples" / "weather-suite-no-judge.yaml")
    ids = list(config.processor_ids)
    assert ids.index("ground_truth") == ids.index("failure_localization") - 1
    assert [c.id for c in config.processors] == [i for i in ids if i != "assembler"]
