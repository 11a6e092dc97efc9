"""`spanscore score --phoenix URL --project NAME`: a real Phoenix's traces scored again.

A real Phoenix runs on loopback (tests/support/phoenix_server.py). Six agent traces, an
hour apart, go to it over OTLP/HTTP; the same request is kept as a file. Then:

- a first revision of `coherence` (threshold 0.5) scores the project with `--write-back`
  and `-o`: the scores are those `spanscore score` gives on the file, and each root span
  has one `spanscore` annotation per metric, the revision in its metadata;
- a second revision (threshold 0.9) scores it again: the same annotations, replaced in
  place (same ids, no more of them), with the new revision, threshold and labels; a
  person's annotation of the same name is left alone;
- a pull interrupted after two pages leaves a state file; the same command goes on from
  it, and the output holds every trace once;
- `--since`/`--until` pull the traces whose root started in the window;
- an unreachable Phoenix, an unknown project, a server that is not Phoenix and a state
  file of another pull are one line each, exit 2.

Skipped when no Phoenix is found (see `phoenix_python`), unless SPANSCORE_REQUIRE_PHOENIX=1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest

from spanscore.config.loader import parse_config
from spanscore.core.otlp_json import encode_request
from spanscore.offline import backfill, otlp_files
from spanscore.offline.phoenix_spans import PhoenixTraces
from tests.support.phoenix_server import REQUIRE_ENV, PhoenixServer, phoenix_python, wait_for
from tests.support.ports import free_port
from tests.support.processes import ROOT, SPANSCORE
from tests.support.spans import new_span_id, new_trace_id, request_of, span

PROJECT = "backfill"
HOUR_NS = 3600 * 10**9
START_NS = 1_700_000_000 * 10**9  # 2023-11-14T22:13:20Z
QUESTION = "What is the weather in Paris today?"
ANSWERS = [
    "The weather in Paris today is sunny and warm.",
    "Bananas grow on large tropical plants.",
    "Paris today: the weather is sunny.",
    "I like trains.",
    "In Paris the weather today is warm and sunny, no rain.",
    "The stock market closed higher.",
]


def config_text(threshold: float) -> str:
    return f"""
receivers:
  otlp: {{protocols: {{http: {{endpoint: 127.0.0.1:0}}}}}}
processors:
  embedding_metrics: {{embedder: {{type: hashing}}, coherence: {{threshold: {threshold}}}}}
exporters:
  debug: {{}}
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [embedding_metrics]
      exporters: [debug]
"""


def messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


@pytest.fixture(scope="module")
def phoenix():
    python, reason = phoenix_python()
    if python is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}; {REQUIRE_ENV}=1 requires it")
        pytest.skip(reason)
    with PhoenixServer(python) as server:
        logging.getLogger(__name__).info("Phoenix started in %.1fs", server.started_in_s)
        yield server


@pytest.fixture(scope="module")
def project(phoenix, tmp_path_factory):
    """The six traces in Phoenix and in a file: {trace id: root span id}, the file, the configs."""
    spans, roots = [], {}
    for index, answer in enumerate(ANSWERS):
        trace_id, root = new_trace_id(), new_span_id()
        start = START_NS + index * HOUR_NS
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "weather",
            "gen_ai.input.messages": messages("user", QUESTION),
            "gen_ai.output.messages": messages("assistant", answer),
        }
        spans.append(span(trace_id, "invoke_agent weather", attributes=attributes, start_ns=start, span_id=root))
        chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
        spans.append(span(trace_id, "chat gpt-4o", parent=root, attributes=chat, start_ns=start + 1000))
        roots[trace_id.hex()] = root.hex()
    request = request_of(spans, service="weather-agent")
    post = urllib.request.Request(
        f"{phoenix.url}/v1/traces",
        data=request.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf", "x-project-name": PROJECT},
    )
    with urllib.request.urlopen(post, timeout=30):
        pass
    assert len(wait_for(lambda: phoenix.spans(PROJECT), lambda s: len(s) == 12, timeout_s=60)) == 12
    folder = tmp_path_factory.mktemp("backfill")
    recorded = folder / "recorded.jsonl"
    recorded.write_text(encode_request(request) + "\n")
    configs = {}
    for name, threshold in (("rev1", 0.5), ("rev2", 0.9)):
        configs[name] = folder / f"{name}.yaml"
        configs[name].write_text(config_text(threshold))
    return {"roots": roots, "recorded": recorded, "configs": configs}


def spanscore(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "PHOENIX_API_KEY"}
    return subprocess.run(
        [*SPANSCORE, "score", *args], capture_output=True, text=True, cwd=cwd, env=environment, timeout=180
    )


def root_results(path: Path) -> dict[str, dict[str, dict]]:
    """{trace id: {metric: {score, label, revision, threshold}}} of the root spans of a scored file."""
    found: dict[str, dict[str, dict]] = {}
    for _, request in otlp_files.read_requests(path, []):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    if s.parent_span_id:
                        continue
                    metrics: dict[str, dict] = {}
                    for attribute in s.attributes:
                        parts = attribute.key.split(".")
                        if len(parts) == 3 and parts[0] == "eval" and parts[2] in ("score", "label", "revision"):
                            value = attribute.value
                            metrics.setdefault(parts[1], {})[parts[2]] = getattr(value, value.WhichOneof("value"))
                    assert s.trace_id.hex() not in found, "a trace written twice"
                    found[s.trace_id.hex()] = metrics
    return found


def spanscore_annotations(phoenix: PhoenixServer, roots: dict[str, str]) -> list[dict]:
    found = phoenix.span_annotations(PROJECT, sorted(roots.values()))
    return [a for a in found if a["identifier"] == "spanscore"]


def test_write_back_then_a_second_revision_replaces_the_annotations(phoenix, project, tmp_path):
    roots, configs = project["roots"], project["configs"]
    reference = tmp_path / "reference.jsonl"
    done = spanscore(str(project["recorded"]), "-o", str(reference), "--config", str(configs["rev1"]), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = tmp_path / "first.jsonl"
    args = ["--phoenix", phoenix.url, "--project", PROJECT, "--write-back", "--page-traces", "4"]
    done = spanscore(*args, "-o", str(first), "--config", str(configs["rev1"]), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "12 spans of 6 traces pulled in 2 pages" in done.stderr
    assert not (tmp_path / backfill.DEFAULT_STATE).exists()  # removed once the pull ended

    # The scores are the file's: Phoenix's spans are converted faithfully enough for the metric.
    pulled, expected = root_results(first), root_results(reference)
    assert set(pulled) == set(roots)
    for trace_id, metrics in expected.items():
        assert pulled[trace_id]["coherence"]["score"] == pytest.approx(metrics["coherence"]["score"])
        assert pulled[trace_id]["coherence"]["label"] == metrics["coherence"]["label"]
        assert pulled[trace_id]["coherence"]["revision"] == metrics["coherence"]["revision"]
    labels = {t: m["coherence"]["label"] for t, m in pulled.items()}
    assert set(labels.values()) == {"pass", "fail"}  # the answers tell pass from fail at 0.5

    # One annotation per root span and metric, with the revision in its metadata.
    expected_count = sum(len(metrics) for metrics in pulled.values())
    annotations = wait_for(
        lambda: spanscore_annotations(phoenix, roots), lambda found: len(found) == expected_count, timeout_s=30
    )
    trace_of = {root: trace for trace, root in roots.items()}
    for annotation in annotations:
        result = pulled[trace_of[annotation["span_id"]]][annotation["name"]]
        assert annotation["metadata"]["revision"] == result["revision"]
        assert annotation["result"]["score"] == pytest.approx(result["score"])
        assert annotation["result"]["label"] == result["label"]
    first_ids = {(a["span_id"], a["name"]): a["id"] for a in annotations}
    assert len(first_ids) == expected_count
    # A person's verdict of the same name on one root span: not spanscore's to replace.
    person = {
        "span_id": next(iter(roots.values())),
        "name": "coherence",
        "annotator_kind": "HUMAN",
        "identifier": "alice",
        "result": {"label": "pass"},
    }
    post = urllib.request.Request(
        f"{phoenix.url}/v1/span_annotations?sync=true",
        data=json.dumps({"data": [person]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(post, timeout=10):
        pass

    # The second revision: a stricter threshold, so a new revision and new labels.
    second = tmp_path / "second.jsonl"
    done = spanscore(*args, "-o", str(second), "--config", str(configs["rev2"]), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rescored = root_results(second)
    new_revision = {m["coherence"]["revision"] for m in rescored.values()}
    old_revision = {m["coherence"]["revision"] for m in pulled.values()}
    assert len(new_revision) == len(old_revision) == 1 and new_revision != old_revision
    for trace_id, metrics in rescored.items():
        assert metrics["coherence"]["score"] == pytest.approx(pulled[trace_id]["coherence"]["score"])
        assert metrics["coherence"]["label"] == ("pass" if metrics["coherence"]["score"] >= 0.9 else "fail")

    def replaced(found: list[dict]) -> bool:
        return all(a["metadata"]["revision"] == rescored[trace_of[a["span_id"]]][a["name"]]["revision"] for a in found)

    annotations = wait_for(lambda: spanscore_annotations(phoenix, roots), replaced, timeout_s=30)
    assert replaced(annotations)
    assert {(a["span_id"], a["name"]): a["id"] for a in annotations} == first_ids  # replaced in place, not added
    for annotation in annotations:
        result = rescored[trace_of[annotation["span_id"]]][annotation["name"]]
        assert annotation["result"]["label"] == result["label"]
        if annotation["name"] == "coherence":
            assert annotation["metadata"]["threshold"] == 0.9
    everyone = phoenix.span_annotations(PROJECT, [person["span_id"]])
    assert [a["result"]["label"] for a in everyone if a["identifier"] == "alice"] == ["pass"]


class StoppedAfter(PhoenixTraces):
    """The pull as a Ctrl-C cuts it: KeyboardInterrupt once `pages` pages were handed out."""

    stop_after = 2

    def pages(self, cursor):
        for count, page in enumerate(super().pages(cursor)):
            if count == self.stop_after:
                raise KeyboardInterrupt
            yield page


def test_an_interrupted_pull_goes_on_from_its_state_file(phoenix, project, tmp_path):
    roots, rev1 = project["roots"], project["configs"]["rev1"]
    output, state = tmp_path / "scored.jsonl", tmp_path / "pull.json"
    traces = StoppedAfter(phoenix.url, None, PROJECT, None, None, page_traces=2)
    sinks = backfill.Sinks(output)
    pull = backfill.pull_of(traces, None, None, sinks)
    config = parse_config(rev1.read_text())
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(backfill.backfill(traces, pull, config, sinks, state, None))
    saved = json.loads(state.read_text())
    assert (saved["pages"], saved["traces"], saved["spans"]) == (2, 4, 8)
    assert saved["cursor"] and saved["output_bytes"] == output.stat().st_size
    assert len(root_results(output)) == 4  # the newest four: Phoenix lists the newest first
    with output.open("a") as file:  # a page half written when the pull stopped
        file.write('{"resourceSpans": [half a line')

    args = ["--phoenix", phoenix.url, "--project", PROJECT, "--page-traces", "2", "--state", str(state)]
    done = spanscore(*args, "-o", str(output), "--config", str(rev1), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "4 spans of 2 traces pulled in 3 pages (resumed after 4 traces)" in done.stderr
    assert set(root_results(output)) == set(roots)  # each trace once: the half line is gone
    assert not state.exists()


def test_since_and_until_pull_the_traces_whose_root_started_in_the_window(phoenix, project, tmp_path):
    """And --exporters: the config's own `file` exporter gets them, as `spanscore run` would send."""
    starts = {s["context"]["trace_id"]: s["start_time"] for s in phoenix.spans(PROJECT, parent_id="null")}
    by_time = sorted(project["roots"], key=lambda t: starts[t])
    exported = tmp_path / "exported.jsonl"
    config = tmp_path / "exporting.yaml"
    config.write_text(
        config_text(0.5).replace("debug: {}", f"file: {{path: '{exported}'}}").replace("[debug]", "[file]")
    )
    since = datetime.fromtimestamp((START_NS + 2 * HOUR_NS) // 10**9, timezone.utc).isoformat()
    until = "2023-11-15T02:13:20Z"  # the fifth trace's start: excluded
    args = ["--phoenix", phoenix.url, "--project", PROJECT, "--since", since, "--until", until]
    done = spanscore(*args, "--exporters", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "4 spans of 2 traces pulled in 1 page -> 2 traces written to the config's exporters" in done.stderr
    window = root_results(exported)
    assert set(window) == set(by_time[2:4])
    assert all("coherence" in metrics for metrics in window.values())


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.splitlines()
    return line


def test_phoenix_down_an_unknown_project_or_another_server_is_one_line_and_exit_2(phoenix, project, tmp_path):
    rev1 = str(project["configs"]["rev1"])
    port = free_port()
    line = one_line(
        spanscore(
            "--phoenix", f"http://127.0.0.1:{port}", "--project", PROJECT, "-o", "x", "--config", rev1, cwd=tmp_path
        )
    )
    assert line == f"spanscore score: cannot reach Phoenix at http://127.0.0.1:{port}: Connection refused"
    line = one_line(spanscore("--phoenix", phoenix.url, "--project", "nope", "-o", "x", "--config", rev1, cwd=tmp_path))
    assert line == f"spanscore score: Phoenix at {phoenix.url} has no project 'nope' (its projects: {PROJECT}, default)"
    line = one_line(
        spanscore(
            "--phoenix", f"{phoenix.url}/healthz", "--project", PROJECT, "-o", "x", "--config", rev1, cwd=tmp_path
        )
    )
    assert line.startswith(
        f"spanscore score: {phoenix.url}/healthz does not answer as Phoenix's REST API does: "
        f"GET /v1/projects/{PROJECT} answered '<!DOCTYPE html>"
    )
    assert line.endswith("', not JSON")
    assert not (tmp_path / "x").exists()  # nothing written before Phoenix answered


def test_a_state_file_of_another_pull_is_not_overwritten(phoenix, project, tmp_path):
    state = tmp_path / "pull.json"
    other = {"phoenix": phoenix.url, "project": "other", "since": None, "until": None, "output": None}
    state.write_text(json.dumps({"version": 1, "pull": other, "cursor": "abc"}))
    done = spanscore(
        "--phoenix", phoenix.url, "--project", PROJECT, "--state", str(state), "-o", "out.jsonl",
        "--config", str(project["configs"]["rev1"]), cwd=tmp_path,
    )  # fmt: skip
    line = one_line(done)
    assert line.startswith(
        f"spanscore score: {state} is the state of another pull (phoenix {phoenix.url}, project other)"
    )
    assert "remove it to start this one, or give another --state" in line
    assert json.loads(state.read_text())["pull"] == other


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--phoenix", "http://127.0.0.1:9", "--project", PROJECT], "needs somewhere for the results"),
        (["--phoenix", "http://127.0.0.1:9", "-o", "x"], "--phoenix URL and --project NAME go together"),
        (["f.jsonl", "--phoenix", "http://127.0.0.1:9", "--project", "p", "-o", "x"], "give no FILE"),
        (["--phoenix", "http://127.0.0.1:9", "--project", "p", "-o", "x", "--since", "monday"], "ISO 8601"),
        (["--phoenix", "u", "--project", "p", "-o", "x", "--since", "2026-02-01", "--until", "2026-01-01"], "before"),
        ([], "give FILE... and -o OUT, or --phoenix URL --project NAME"),
    ],
)
def test_flags_that_do_not_go_together_are_a_usage_error(args, says, tmp_path):
    done = spanscore(*args, cwd=ROOT)
    assert done.returncode == 2
    assert says in done.stderr
